"""The training studies of Li et al. 2024 as resumable one-command experiments.

A *run* is one training configuration (``RunSpec``: encoder, loss dict, parameters, seed,
steps, batch size, data); its id is the hash of its canonical JSON, and it lives in
``OUT/runs/<id>/`` with its config, training log, monitor log, held-out statistics,
best-dev result and test score, committed atomically (``COMPLETE.json`` is written last,
in a temporary directory renamed into place). A *study* is a list of runs and the
figures / Result bundles / ``results.md`` built from them (``STUDIES``). ``run_study``
executes only the missing runs (in local processes, or on SLURM through submitit, or on
Dask) and rebuilds the outputs. Workers claim runs with leases renewed by a heartbeat, so
several launchers and hosts can share one store on a shared filesystem.

Public names:
  RunSpec, canonical_loss, loss_label, SCHEMA_VERSION       (a run; gradlab.resolve_loss resolves its loss)
  Scale, STUDIES, study_runs, baseline, SIMCSE_LOSSES                      (the studies)
  CPU_RUN, QUICK_RUN, SIMCSE_RUN, SIMCSE_QUICK_RUN                (their run templates: the sizes)
  run_study, study_status, execute, plan, default_jobs, is_environmental   (running)
  EXECUTORS, make_executor, parse_executor_option, DASK_CONNECT_TIMEOUT_S  (where runs execute)
  run_status, run_state, read_record, run_dir, acquire_lease, read_lease    (the store)
  run_path, trajectory, write_trajectory                                    (paths on the maps)
  render_writeup, load_numbers, claims_table, page_claims, verdicts_text   (the write-up from the numbers)
  simcse_claims, simcse_comparisons, portable_command     (claims re-decided from numbers; portable commands)

The statistics that decide every claim (paired / Welch / one-sample t, TOST, Holm, the verdict
vocabulary) are the public module ``gradlab.experiments.stats``.
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
    "SIMCSE_LOSSES": "gradlab.experiments._studies",
    "CPU_RUN": "gradlab.experiments._studies",
    "QUICK_RUN": "gradlab.experiments._studies",
    "SIMCSE_RUN": "gradlab.experiments._studies",
    "SIMCSE_QUICK_RUN": "gradlab.experiments._studies",
    "run_study": "gradlab.experiments._api",
    "study_status": "gradlab.experiments._api",
    "EXECUTORS": "gradlab.experiments._executors",
    "DASK_CONNECT_TIMEOUT_S": "gradlab.experiments._executors",
    "make_executor": "gradlab.experiments._executors",
    "parse_executor_option": "gradlab.experiments._executors",
    "is_environmental": "gradlab.experiments._worker",
    "acquire_lease": "gradlab.experiments._store",
    "read_lease": "gradlab.experiments._store",
    "run_state": "gradlab.experiments._store",
    "execute": "gradlab.experiments._sweep",
    "plan": "gradlab.experiments._sweep",
    "default_jobs": "gradlab.experiments._executors",
    "run_status": "gradlab.experiments._store",
    "read_record": "gradlab.experiments._store",
    "run_dir": "gradlab.experiments._store",
    "run_path": "gradlab.experiments._trajectory",
    "trajectory": "gradlab.experiments._trajectory",
    "write_trajectory": "gradlab.experiments._trajectory",
    "render_writeup": "gradlab.experiments._writeup",
    "load_numbers": "gradlab.experiments._writeup",
    "claims_table": "gradlab.experiments._writeup",
    "page_claims": "gradlab.experiments._writeup",
    "verdicts_text": "gradlab.experiments._writeup",
    "simcse_claims": "gradlab.experiments._build_table3",
    "simcse_comparisons": "gradlab.experiments._build_table3",
    "portable_command": "gradlab.experiments._tables",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = attach(__name__, _LAZY)
