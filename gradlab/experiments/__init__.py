"""The training studies of Li et al. 2024 as resumable one-command experiments.

A *run* is one training configuration (``RunSpec``: encoder, loss dict, parameters, seed,
steps, batch size, data); its id is the hash of its canonical JSON, and it lives in
``OUT/runs/<id>/`` with its config, training log, monitor log, held-out statistics,
best-dev result and test score, committed atomically (``COMPLETE.json`` is written last,
in a temporary directory renamed into place). A *study* is a list of runs and the
figures / Result bundles / ``results.md`` built from them (``STUDIES``). ``run_study``
executes only the missing runs (in ``jobs`` processes) and rebuilds the outputs.

Public names:
  RunSpec, canonical_loss, loss_label, SCHEMA_VERSION       (a run; gradlab.resolve_loss resolves its loss)
  Scale, STUDIES, study_runs, baseline                                     (the studies)
  run_study, execute, plan, default_jobs                                    (running)
  run_status, read_record, run_dir                                          (the store)
  run_path, trajectory, write_trajectory                                    (paths on the maps)
"""

from __future__ import annotations

from gradlab._lazy import attach

_LAZY = {
    "RunSpec": "gradlab.experiments._spec",
    "canonical_loss": "gradlab.experiments._spec",
    "loss_label": "gradlab.experiments._spec",
    "SCHEMA_VERSION": "gradlab.experiments._spec",
    "Scale": "gradlab.experiments._studies",
    "STUDIES": "gradlab.experiments._studies",
    "study_runs": "gradlab.experiments._studies",
    "baseline": "gradlab.experiments._studies",
    "run_study": "gradlab.experiments._api",
    "execute": "gradlab.experiments._sweep",
    "plan": "gradlab.experiments._sweep",
    "default_jobs": "gradlab.experiments._sweep",
    "run_status": "gradlab.experiments._store",
    "read_record": "gradlab.experiments._store",
    "run_dir": "gradlab.experiments._store",
    "run_path": "gradlab.experiments._trajectory",
    "trajectory": "gradlab.experiments._trajectory",
    "write_trajectory": "gradlab.experiments._trajectory",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = attach(__name__, _LAZY)
