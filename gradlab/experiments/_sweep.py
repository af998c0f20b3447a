"""Run a list of RunSpecs: skip the committed ones, execute the rest in ``jobs`` processes.

Resume rule: a run whose directory holds a ``done`` marker is never redone. A ``failed``
run (its error recorded) is not redone either — the same configuration and seed fail the
same way — unless ``retry_failed=True``. Everything else (no directory, or one without a
marker: a run killed in flight) is executed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from gradlab.experiments._spec import RunSpec
from gradlab.experiments._store import clean_stale, read_record

__all__ = ["execute", "plan", "default_jobs"]


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def plan(specs: Sequence[RunSpec], out, *, retry_failed: bool = False) -> tuple[list[RunSpec], list[RunSpec]]:
    """(unique specs in order, the ones to execute: seed 0 of every configuration first).

    Executing seed by seed means an interrupted sweep has whole single-seed studies first.
    """
    unique = list({s.id: s for s in specs}.values())
    todo = []
    for s in unique:
        rec = read_record(out, s.id)
        if rec is None or (retry_failed and rec["status"] == "failed"):
            todo.append(s)
    return unique, sorted(todo, key=lambda s: s.seed)


def _init_worker(threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it terminates us on Ctrl-C
    from gradlab.experiments._worker import limit_threads

    limit_threads(threads)


def execute(
    specs: Sequence[RunSpec],
    out,
    *,
    jobs: int | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int, dict[str, Any] | None], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Execute the missing runs of ``specs`` under ``out/runs`` and return every record by id.

    Args:
      specs: the runs (duplicates, by id, run once).
      out: the experiment directory.
      jobs: worker processes (default: the number of cores). With ``jobs > 1`` each worker is a
        spawned process limited to one XLA / BLAS thread, so ``jobs`` runs use ``jobs`` cores.
      retry_failed: also redo runs recorded as failed.
      progress: ``progress(done, total, record)`` after each finished run (and once at the start
        with ``record=None``); ``total`` counts only the runs executed now.

    Returns:
      ``{id: record}`` for every spec: ``record["status"]`` is ``"done"`` or ``"failed"``.

    Raises:
      KeyboardInterrupt: after terminating the workers; finished runs stay committed,
        the runs in flight leave nothing behind.
    """
    from gradlab.experiments._worker import run_one

    jobs = default_jobs() if jobs is None else int(jobs)
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1; got {jobs}")
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    clean_stale(out)
    unique, todo = plan(specs, out, retry_failed=retry_failed)
    total = len(todo)
    if progress is not None:
        progress(0, total, None)
    done = 0
    if jobs == 1 or total <= 1:
        for s in todo:
            rec = run_one(s.to_dict(), str(out))
            done += 1
            if progress is not None:
                progress(done, total, rec)
    else:
        _pool(todo, out, min(jobs, total), progress, total)
    records = {}
    for s in unique:
        rec = read_record(out, s.id)
        if rec is None:  # pragma: no cover - committed above, or an error was raised
            raise RuntimeError(f"run {s.id} ({s.label}) left no record")
        rec["spec"] = s.to_dict()
        records[s.id] = rec
    return records


def _pool(todo, out, workers, progress, total) -> None:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from gradlab.experiments._worker import run_one

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                               initializer=_init_worker, initargs=(1,))
    pending = set()
    try:
        pending = {pool.submit(run_one, s.to_dict(), str(out)) for s in todo}
        done = 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                rec = f.result()
                done += 1
                if progress is not None:
                    progress(done, total, rec)
    except BrokenProcessPool:
        _terminate(pool)
        clean_stale(out)
        raise RuntimeError("a worker process died (killed?); its run was not committed: rerun to resume") from None
    except BaseException:
        _terminate(pool)
        clean_stale(out)
        raise
    pool.shutdown(wait=True)


def _terminate(pool) -> None:
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)
    pool.shutdown(wait=False, cancel_futures=True)
