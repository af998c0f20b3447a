"""``run_study``: execute a study's missing runs, then rebuild its figures, Results and tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gradlab.experiments._spec import canonical_loss
from gradlab.experiments._studies import STUDIES, Scale, study_runs

__all__ = ["run_study"]


def run_study(
    study: str,
    out: str | Path,
    *,
    scale: Scale | None = None,
    jobs: int | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int, dict[str, Any] | None], None] | None = None,
    command: str | None = None,
    fmt: str = "png",
    losses: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Run a named study (Li et al. 2024 Figs. 1, 5–9, Table 3, or ``trajectory``, or ``all``).

    Runs already committed under ``out/runs`` are reused; the figures, Result bundles and
    ``results.md`` of the study are rebuilt from every run's record. A failed run is
    recorded and shown as failed in the tables; the other runs go on.

    Args:
      study: a name of ``STUDIES``.
      out: the experiment directory (``out/runs/<id>``, ``out/<study>/``).
      scale: run sizes (default ``Scale()``: CPU scale, light encoder, 3 seeds).
      jobs: worker processes (default: the number of cores).
      retry_failed: redo runs recorded as failed.
      progress: ``progress(done, total, record)`` as runs finish.
      command: the command line written into the tables (default: a Python call).
      fmt: figure format.
      losses: ``trajectory`` only (and ``all``): the losses to train and draw on their own
        simulated maps instead of the baseline and ArcCon; names or loss dicts
        (``RunSpec.loss``), e.g. ``{"user": "my_losses.py:focal", "params": {"gamma": 1}}``.

    Returns:
      ``{"records": {id: record}, "files": [paths], "executed": int, "failed": int, "wall_s": float}``.

    Example (not run here: it trains)::

        from gradlab.experiments import Scale, run_study
        run_study("fig6", "out/exp", scale=Scale.make(quick=True))
    """
    from gradlab.experiments._build import BUILDERS, Context
    from gradlab.experiments._sweep import execute, plan

    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; choose from {', '.join(STUDIES)}")
    scale = Scale() if scale is None else scale
    if losses and study not in ("trajectory", "all"):
        raise ValueError(f"losses= chooses the trajectory study's losses; not {study!r}'s")
    losses = None if not losses else [canonical_loss(loss) for loss in losses]
    t0 = time.perf_counter()
    specs = study_runs(study, scale, losses=losses)
    _, todo = plan(specs, out, retry_failed=retry_failed)
    records = execute(specs, out, jobs=jobs, retry_failed=retry_failed, progress=progress)
    wall = time.perf_counter() - t0
    command = command or f"gradlab.experiments.run_study({study!r}, {str(out)!r}, scale={scale!r})"
    files: list[Path] = []
    names = [n for n in STUDIES if n != "all"] if study == "all" else [study]
    for name in names:
        sub = {s.id: records[s.id] for s in study_runs(name, scale, losses=losses)}
        ctx = Context(name, sub, scale, Path(out), command=command, wall_s=wall, executed=sum(
            1 for s in todo if s.id in sub), fmt=fmt, losses=losses)
        BUILDERS[name](ctx)
        files.extend(ctx.files)
    failed = sum(1 for r in records.values() if r["status"] != "done")
    return {"records": records, "files": files, "executed": len(todo), "failed": failed,
            "wall_s": time.perf_counter() - t0}
