"""Execute one run (in the calling process or a spawned worker): train, analyze the held-out
sentences before and after, write the run directory and commit it.

One run's life, top to bottom (``run_one``): check the store (``_check_store``: the probe, a
committed ``done`` record, the lease) -> build directory (``_build_dir``) -> train and held-out
analysis (``_train``; what a run computes is ``gradlab.experiments._compute.train_run``) -> commit
(``_commit_if_held``) -> the record.

This module imports no JAX (nor NumPy) at import time, so a spawned worker can limit XLA's
threads (``limit_threads``) before JAX starts.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradlab.errors import one_line
from gradlab.experiments._compute import train_run
from gradlab.experiments._spec import RunSpec
from gradlab.experiments._store import (
    Lease,
    acquire_lease,
    commit_run,
    read_lease,
    read_record,
    tmp_dir,
)
from gradlab.threads import limit_threads

__all__ = ["run_one", "RemoteRun", "RemoteRuns", "is_environmental", "check_probe", "limit_threads"]

#: The leases this process holds, by run id (``release_held`` frees them on preemption).
_HELD: dict[str, Lease] = {}
#: The compilation cache this process switched on (``use_compile_cache``).
_COMPILE_CACHE: dict[str, str | None] = {}


# --------------------------------------------------------------------------- the worker process
def use_compile_cache(directory: str | None = None) -> None:
    """Switch on gradlab's persistent compilation cache (``gradlab.enable_cache``) in this worker.

    ``directory`` is the launcher's cache location (so every worker of a study, on any host,
    uses the one configured for the CLI and the library); None = ``GRADLAB_CACHE_DIR`` or
    the user cache directory; ``"off"`` leaves it off. Best effort: a cache is an optimization,
    an unusable directory only costs compilations.
    """
    if _COMPILE_CACHE.get("directory", False) == directory:
        return
    _COMPILE_CACHE["directory"] = directory
    try:
        from gradlab._cache import enable_cache

        enable_cache(directory)
    except Exception:  # noqa: BLE001 - a cache is an optimization only
        pass


def release_held() -> None:
    """Release every lease this process holds (a preempted job, before it is requeued)."""
    for lease in list(_HELD.values()):
        lease.release()


# --------------------------------------------------------------------------- faults
#: ``errno`` values of an ``OSError`` that say the machine, not the run, failed.
ENVIRONMENTAL_ERRNO = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.ESTALE, errno.ENOMEM})


def is_environmental(exc: BaseException) -> bool:
    """Whether an exception is a fault of the machine (retried, never recorded as a result).

    Environmental: ``OSError`` ENOSPC / EIO / EDQUOT / ESTALE / ENOMEM, ``MemoryError``, and XLA's
    ``RESOURCE_EXHAUSTED`` (out of device memory). Anything else raised by a run (its loss
    raising, a non-finite loss, a ``ValueError`` / ``TypeError``) is deterministic.

    Examples:
      >>> is_environmental(OSError(errno.ENOSPC, "No space left on device"))
      True
      >>> is_environmental(RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB"))
      True
      >>> is_environmental(FloatingPointError("non-finite training loss at step 3"))
      False
    """
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENTAL_ERRNO:
        return True
    return "RESOURCE_EXHAUSTED" in str(exc)


class StoreNotShared(RuntimeError):
    """The worker cannot read the launcher's probe file: it does not see the same OUT."""


PROBE = ".probe-"


def check_probe(out: str, probe: str) -> None:
    """Raise :class:`StoreNotShared` unless ``out/.probe-<probe>`` holds ``probe``."""
    import socket

    path = Path(out) / f"{PROBE}{probe}"
    try:
        seen = path.read_text(encoding="utf-8").strip()
    except OSError:
        seen = None
    if seen != probe:
        raise StoreNotShared(f"the experiment directory {str(out)!r} is not the launcher's on host "
                             f"{socket.gethostname()!r} (cannot read {path.name}): workers must see the same "
                             "directory (a shared filesystem)")


# --------------------------------------------------------------------------- one run's life
def run_one(spec_dict: dict[str, Any], out: str, probe: str | None = None, cache: str | None = None) -> dict[str, Any]:
    """Claim, train and commit one run ``out/runs/<id>``; returns its record.

    ``record["status"]``: ``done`` or ``failed`` (committed: a deterministic error of the run,
    its one-line error recorded); ``retry`` (an environmental fault, see ``is_environmental``:
    nothing committed, ``reason`` says why); ``busy`` (another live worker holds the run's
    lease; ``holder`` names its host). A KeyboardInterrupt removes the build directory,
    releases the lease and propagates.

    Args:
      spec_dict: ``RunSpec.to_dict()`` (all that travels to a worker, with ``out``).
      out: the experiment directory, as the worker sees it.
      probe: the launcher's probe token (checks that the worker sees the launcher's ``out``).
      cache: the compilation cache directory (``use_compile_cache``).
    """
    spec = RunSpec.from_dict(spec_dict)
    record, lease = _check_store(out, spec.id, probe)
    if lease is not None:
        record = _run_leased(spec, out, lease, cache)
    return {**record, "spec": spec.to_dict()}


def _check_store(out: str, run_id: str, probe: str | None) -> tuple[dict[str, Any] | None, Lease | None]:
    """The store's answer before any work: ``(None, lease)`` when this worker claimed the run, else
    ``(record, None)``: its committed ``done`` record, ``busy`` (another worker's live lease) or
    ``retry`` (the store itself failed: not this run's result)."""
    try:
        if probe is not None:
            check_probe(out, probe)
        record = _done_record(out, run_id)
        lease = None if record is not None else acquire_lease(out, run_id)
    except Exception as exc:  # noqa: BLE001 - the store itself failed: not this run's result
        return _retry(run_id, one_line(exc), retryable=not isinstance(exc, StoreNotShared)), None
    if record is None and lease is None:
        record = _busy(run_id, (read_lease(out, run_id) or {}).get("host"))
    return record, lease


def _run_leased(spec: RunSpec, out: str, lease: Lease, cache: str | None) -> dict[str, Any]:
    """The record of a claimed run; the lease is released whatever happens (a KeyboardInterrupt too)."""
    _HELD[spec.id] = lease
    try:
        done = _done_record(out, spec.id)  # committed by another worker between the check and the claim
        return done if done is not None else _build_train_commit(spec, out, lease, cache)
    finally:
        _HELD.pop(spec.id, None)
        lease.release()


def _build_train_commit(spec: RunSpec, out: str, lease: Lease, cache: str | None) -> dict[str, Any]:
    """Build the run directory, train, commit: the committed record; ``busy`` when the lease was lost
    meanwhile; ``retry`` when the machine failed (disk, memory: nothing is committed)."""
    t0 = time.perf_counter()
    try:
        use_compile_cache(cache)
        with _build_dir(out, spec.id, lease.token) as build:
            _write_json(build / "config.json", {"id": spec.id, "schema_json": spec.canonical_json(), **spec.to_dict()})
            marker = _train(spec, build, t0)
            committed = _commit_if_held(out, spec.id, build, marker, lease)
    except Exception as exc:  # noqa: BLE001 - the machine failed (disk, memory): nothing is committed
        return _retry(spec.id, one_line(exc))
    return _read_back(out, spec.id) if committed else _lease_lost(spec.id)


@contextlib.contextmanager
def _build_dir(out: str, run_id: str, token: str) -> Iterator[Path]:
    """A fresh private build directory, removed if anything (a fault, a KeyboardInterrupt) escapes."""
    build = tmp_dir(out, run_id, token)
    try:
        yield build
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def _train(spec: RunSpec, build: Path, t0: float) -> dict[str, Any]:
    """Train in ``build`` and write ``result.json``: the marker to commit. A deterministic error of the
    run is the ``failed`` marker (its traceback in ``error.txt``); an environmental one propagates."""
    try:
        result = train_run(spec, build)
        seconds = time.perf_counter() - t0
        _write_json(build / "result.json", {"id": spec.id, "label": spec.label, **result})
        return {"status": "done", "id": spec.id, "seconds": seconds}
    except Exception as exc:  # noqa: BLE001 - a failing run is recorded, the sweep goes on
        if is_environmental(exc):
            raise
        (build / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        return {"status": "failed", "id": spec.id, "error": one_line(exc), "seconds": time.perf_counter() - t0}


def _commit_if_held(out: str, run_id: str, build: Path, marker: dict[str, Any], lease: Lease) -> bool:
    """Commit ``build`` as the run; False (``build`` removed) when another worker reclaimed the lease as stale."""
    held = lease.held()
    if held:
        commit_run(out, run_id, build, marker, token=lease.token)
    else:
        shutil.rmtree(build, ignore_errors=True)
    return held


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from gradlab.io import save_json_atomic  # NumPy: only once a run starts

    save_json_atomic(path, data)


def _done_record(out: str, run_id: str) -> dict[str, Any] | None:
    """The run's committed record if it is ``done``, else None."""
    record = read_record(out, run_id)
    return record if record is not None and record["status"] == "done" else None


def _read_back(out: str, run_id: str) -> dict[str, Any]:
    """The record just committed."""
    record = read_record(out, run_id)
    if record is None:  # pragma: no cover - committed by the caller
        return _retry(run_id, "the committed run could not be read back")
    return record


def _retry(run_id: str, reason: str, retryable: bool = True) -> dict[str, Any]:
    return {"status": "retry", "id": run_id, "reason": reason, "retryable": retryable}


def _busy(run_id: str, holder: str | None) -> dict[str, Any]:
    return {"status": "busy", "id": run_id, "holder": holder}


def _lease_lost(run_id: str) -> dict[str, Any]:
    return {**_busy(run_id, None), "reason": "lease lost (reclaimed as stale)"}


# --------------------------------------------------------------------------- cluster callables
class RemoteRuns:
    """One cluster task running several runs in turn: ``RemoteRuns(fn)([args, ...])`` -> one result each.

    A fresh worker process pays its start-up, imports and model loading once per task instead of
    once per run. A run's exception becomes its result (the launcher classifies it), so one
    failing run does not take its neighbours down. ``checkpoint`` (submitit's preemption /
    timeout hook) releases the held leases and resubmits the whole task; the runs it already
    committed are found done and not trained again.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, calls: list) -> list:
        out = []
        for args in calls:
            try:
                out.append(self.fn(*args))
            except Exception as exc:  # noqa: BLE001 - reported per run
                out.append(exc)
        return out

    def checkpoint(self, *args: Any, **kwargs: Any):
        from submitit.helpers import DelayedSubmission

        release_held()
        return DelayedSubmission(self, *args, **kwargs)


class RemoteRun:
    """The callable sent to a cluster worker: ``RemoteRun()(spec_dict, out, probe, cache, threads)``.

    Only the spec dict and a few strings travel (never a jitted function). ``checkpoint`` is
    submitit's preemption / timeout hook: it releases the run's lease and resubmits the same
    call, which restarts the run from scratch (the trainer keeps no resumable state; a run is
    short, and its id makes the restart compute the same numbers).
    """

    def __call__(self, spec_dict: dict[str, Any], out: str, probe: str | None = None, cache: str | None = None,
                 threads: int | None = None) -> dict[str, Any]:
        if threads:
            limit_threads(int(threads))
        return run_one(spec_dict, out, probe=probe, cache=cache)

    def checkpoint(self, *args: Any, **kwargs: Any):
        from submitit.helpers import DelayedSubmission

        release_held()
        return DelayedSubmission(self, *args, **kwargs)
