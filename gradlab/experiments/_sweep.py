"""Run a list of RunSpecs: skip the committed ones, execute the rest on an executor
(``local`` processes, submitit / SLURM, Dask; see ``_executors``).

Resume rule: a run whose directory holds a ``done`` marker is never redone. A ``failed``
run (its error recorded) is not redone either — the same configuration and seed fail the
same way — unless ``retry_failed=True``. Everything else (no directory, or one without a
marker: a run killed in flight, a run an environmental fault left not done) is executed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from gradlab.experiments._spec import RunSpec
from gradlab.experiments._store import clean_stale, read_record
from gradlab.experiments._worker import PROBE

__all__ = ["execute", "plan", "write_probe"]


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


def execute(
    specs: Sequence[RunSpec],
    out,
    *,
    jobs: int | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int, dict[str, Any] | None], None] | None = None,
    executor: Any = "local",
    executor_options: dict[str, Any] | None = None,
    retries: int = 2,
    backoff_s: float = 5.0,
) -> dict[str, dict[str, Any]]:
    """Execute the missing runs of ``specs`` under ``out/runs`` and return every record by id.

    An environmental fault (``_worker.is_environmental``: a full disk, I/O error, out of memory,
    a killed or lost worker, a preempted or timed-out job) is retried ``retries`` times with a
    growing pause (``backoff_s``, doubled each time), then left *not done* with its reason (and
    redone by the next call); it is never recorded as a result. A run whose lease another live
    worker holds (a second launcher on the same store) is waited for, polling the store.

    Args:
      specs: the runs (duplicates, by id, run once).
      out: the experiment directory (every worker must see it: a shared filesystem).
      jobs: runs in parallel (local: processes, default the number of cores; with ``jobs > 1``
        each is a spawned process limited to one XLA / BLAS thread; submitit: the array's
        parallelism; dask: the LocalCluster's size when no scheduler is given).
      retry_failed: also redo runs recorded as failed.
      progress: ``progress(done, total, record)`` after each finished run (and once at the start
        with ``record=None``); ``total`` counts only the runs executed now.
      executor: ``"local"``, ``"submitit"``, ``"dask"`` or an executor object (``_executors``).
      executor_options: the executor's options (``make_executor``).
      retries: extra attempts of a run after an environmental fault.
      backoff_s: the pause before the first retry.

    Returns:
      ``{id: record}`` for every spec: ``record["status"]`` is ``"done"``, ``"failed"`` (its
      ``error``), or ``"missing"`` (not done: ``error`` says why).

    Raises:
      KeyboardInterrupt: after cancelling what was submitted; finished runs stay committed,
        the runs in flight leave nothing behind, and the next call resumes.
    """
    from gradlab._cache import worker_setting
    from gradlab.experiments._executors import make_executor

    if jobs is not None and int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1; got {jobs}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0; got {retries!r}")
    from gradlab.outputs import check_out_dir

    unique, todo = plan(specs, out, retry_failed=retry_failed)
    # the executor first (an unreachable scheduler, SLURM options without SLURM): a launch that
    # cannot run fails before it creates anything under out
    runner = make_executor(executor, out, jobs=jobs, options=executor_options) if todo else None
    try:
        check_out_dir(os.path.join(out, "runs"))
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    clean_stale(out)
    unique, todo = plan(specs, out, retry_failed=retry_failed)
    total = len(todo)
    if progress is not None:
        progress(0, total, None)
    reasons: dict[str, str] = {}
    if runner is not None and not todo:  # another launcher finished them meanwhile
        runner.close()
    elif runner is not None:
        probe = write_probe(out)
        try:
            # workers get the absolute path: a Dask worker's working directory is not the launcher's
            reasons = _rounds(runner, todo, os.path.abspath(out), probe, worker_setting(), progress, total, retries, backoff_s)
        except BaseException:
            runner.cancel()
            raise
        finally:
            runner.close()
            clean_stale(out)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(out, f"{PROBE}{probe}"))
    records = {}
    for s in unique:
        rec = read_record(out, s.id)
        if rec is None:
            rec = {"status": "missing", "id": s.id, "error": "not done: " + reasons.get(s.id, "not executed")}
        rec["spec"] = s.to_dict()
        records[s.id] = rec
    return records


def write_probe(out) -> str:
    """Write ``out/.probe-<token>`` holding a random token, which every worker must read back."""
    import uuid

    from gradlab.io import atomic_write_text

    token = uuid.uuid4().hex
    atomic_write_text(os.path.join(out, f"{PROBE}{token}"), token)
    return token


def _rounds(runner, todo, out, probe, cache, progress, total, retries, backoff_s) -> dict[str, str]:
    """Submit, collect, resubmit environmental faults and runs another worker held; the reasons
    of the runs left not done."""
    from gradlab.experiments._executors import Call
    from gradlab.experiments._store import is_stale, lease_period, read_lease

    attempts = {s.id: 0 for s in todo}
    reasons: dict[str, str] = {}
    waiting: dict[str, RunSpec] = {}
    queue = list(todo)
    done = 0
    pause = backoff_s
    while queue or waiting:
        retry: list[RunSpec] = []
        by_id = {s.id: s for s in queue}
        calls = [Call(s.id, s.to_dict(), out, probe, cache) for s in queue]
        for rid, rec in (runner.run(calls) if calls else ()):
            status = rec.get("status") if isinstance(rec, dict) else None
            if status in ("done", "failed"):
                reasons.pop(rid, None)
                done += 1
                if progress is not None:
                    progress(done, total, rec)
                continue
            if status == "busy":
                waiting[rid] = by_id[rid]
                continue
            reason = rec.get("reason", "?") if isinstance(rec, dict) else _describe(rec)
            reasons[rid] = reason
            attempts[rid] += 1
            if attempts[rid] <= retries and (not isinstance(rec, dict) or rec.get("retryable", True)):
                retry.append(by_id[rid])
        # runs another launcher's worker holds: poll until committed, released or stale
        while waiting and not retry:
            for rid in list(waiting):
                lease = read_lease(out, rid)
                if read_record(out, rid) is not None:
                    del waiting[rid]
                    done += 1
                    if progress is not None:
                        progress(done, total, read_record(out, rid))
                elif lease is None or is_stale(lease):
                    retry.append(waiting.pop(rid))
            if waiting and not retry:
                time.sleep(lease_period())
        if retry and any(attempts[s.id] for s in retry):
            time.sleep(pause)
            pause *= 2
        queue = retry
    return reasons


def _describe(exc: BaseException) -> str:
    from gradlab.errors import one_line

    name = type(exc).__name__
    if name == "BrokenProcessPool":
        return "a worker process died (killed or out of memory)"
    if name == "KilledWorker":
        return "the Dask worker running it was lost (Dask's retries exhausted)"
    return one_line(exc)
