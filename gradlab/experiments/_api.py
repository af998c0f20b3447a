"""``run_study``: execute a study's missing runs, then rebuild its figures, Results and tables."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gradlab.experiments._spec import canonical_loss
from gradlab.experiments._studies import STUDIES, Scale, study_runs

__all__ = ["run_study", "study_status"]


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
    executor: Any = "local",
    executor_options: dict[str, Any] | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """Run a named study (Li et al. 2024 Figs. 1, 5–9, Table 3, or ``trajectory``, or ``all``).

    Runs already committed under ``out/runs`` are reused; the figures, Result bundles and
    ``results.md`` of the study are rebuilt from every run's record. A failed run is
    recorded and shown as failed in the tables; the other runs go on. A run an
    environmental fault stopped (a full disk, a killed worker, ...) is retried ``retries``
    times, then left not done (never recorded) and redone by the next call.

    Args:
      study: a name of ``STUDIES``.
      out: the experiment directory (``out/runs/<id>``, ``out/<study>/``).
      scale: run sizes (default ``Scale()``: CPU scale, light encoder, 5 seeds).
      jobs: worker processes (default: the number of cores).
      retry_failed: redo runs recorded as failed.
      progress: ``progress(done, total, record)`` as runs finish.
      command: the command line written into the tables (default: a Python call).
      fmt: figure format.
      losses: ``trajectory`` only (and ``all``): the losses to train and draw on their own
        simulated maps instead of the baseline and ArcCon; names or loss dicts
        (``RunSpec.loss``), e.g. ``{"user": "my_losses.py:focal", "params": {"gamma": 1}}``.
      executor: ``"local"`` (a process pool), ``"submitit"`` (SLURM job arrays, or local
        processes without SLURM), ``"dask"`` (a ``dask.distributed`` scheduler) or an executor
        object (``run`` / ``cancel`` / ``close``); see the "Running on a cluster" page.
      executor_options: e.g. ``{"timeout_min": 60, "gpus_per_node": 1}`` (submitit),
        ``{"address": "tcp://host:8786", "resources": {"GPU": 1}}`` (dask).
      retries: extra attempts of a run after an environmental fault.

    Returns:
      ``{"records": {id: record}, "files": [paths], "executed": int, "failed": int,
      "not_done": {id: reason}, "wall_s": float}``: ``not_done`` holds every run that is not
      ``done`` (failed ones with their error).

    Example (not run here: it trains)::

        from gradlab.experiments import Scale, run_study
        run_study("fig6", "out/exp", scale=Scale.make(quick=True))
    """
    from gradlab.experiments._build import BUILDERS, Context
    from gradlab.experiments._sweep import execute, plan

    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; choose from {', '.join(STUDIES)}")
    scale = Scale.make(study=study) if scale is None else scale
    if losses and study not in ("trajectory", "all"):
        raise ValueError(f"losses= chooses the trajectory study's losses; not {study!r}'s")
    losses = None if not losses else [canonical_loss(loss) for loss in losses]
    t0 = time.perf_counter()
    specs = study_runs(study, scale, losses=losses)
    _, todo = plan(specs, out, retry_failed=retry_failed)
    records = execute(specs, out, jobs=jobs, retry_failed=retry_failed, progress=progress, executor=executor,
                      executor_options=executor_options, retries=retries)
    wall = time.perf_counter() - t0
    command = command or f"gradlab.experiments.run_study({study!r}, {str(out)!r}, scale={scale!r})"
    files: list[Path] = []
    names = [n for n in STUDIES if n not in ("all", "simcse")] if study == "all" else [study]
    for name in names:
        sub = {s.id: records[s.id] for s in study_runs(name, scale, losses=losses)}
        ctx = Context(name, sub, scale, Path(out), command=command, wall_s=wall, executed=sum(
            1 for s in todo if s.id in sub), fmt=fmt, losses=losses)
        BUILDERS[name](ctx)
        files.extend(ctx.files)
    failed = sum(1 for r in records.values() if r["status"] == "failed")
    not_done = {k: (f"failed: {r.get('error')}" if r["status"] == "failed" else str(r.get("error", "?")).removeprefix("not done: "))
                for k, r in records.items() if r["status"] != "done"}
    return {"records": records, "files": files, "executed": len(todo), "failed": failed, "not_done": not_done,
            "wall_s": time.perf_counter() - t0}


def study_status(study: str, out: str | Path, *, scale: Scale | None = None,
                 losses: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """Where each run of a study stands, without running anything.

    Returns:
      One dict per run (in the study's order): ``id``, ``label``, ``state`` (``done``,
      ``running`` with ``host``, ``pid`` and ``heartbeat_age`` in seconds, ``failed`` with
      ``error``, or ``missing``).

    Raises:
      FileNotFoundError: ``out`` does not exist (a mistyped ``--out`` must not read as "all missing").
    """
    from gradlab.experiments._store import run_state

    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; choose from {', '.join(STUDIES)}")
    if not Path(out).is_dir():
        raise FileNotFoundError(f"no experiment directory {str(out)!r}: nothing has run there (check --out)")
    scale = Scale.make(study=study) if scale is None else scale
    losses = None if not losses else [canonical_loss(loss) for loss in losses]
    specs = list({s.id: s for s in study_runs(study, scale, losses=losses)}.values())
    return [{"id": s.id, "label": s.label, **run_state(out, s.id)} for s in specs]
