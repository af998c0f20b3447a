"""Run directories: ``OUT/runs/<id>/``, built in a temporary directory and renamed into place.

A run directory holds ``config.json`` (the spec and its id), ``train_log.jsonl``,
``paradigm_monitor.jsonl``, ``train.json`` (the trainer's summary), ``heldout.npz``
(held-out statistics before / after training) and ``result.json`` (best dev, test, ...),
and last ``COMPLETE.json``, the marker: ``{"status": "done" | "failed", ...}``.

Commit protocol: a worker writes everything, the marker last (atomically), into
``runs/.tmp-<id>-<pid>/`` and then renames that directory to ``runs/<id>``. A directory
without a marker (a run killed in flight, or anything else) counts as missing and is
redone; a temporary directory is never read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "run_dir", "run_status", "read_record", "commit_run", "clean_stale", "tmp_dir"]

MARKER = "COMPLETE.json"
RUNS = "runs"


def run_dir(out: str | os.PathLike, run_id: str) -> Path:
    """``out/runs/<id>``."""
    return Path(out) / RUNS / run_id


def tmp_dir(out: str | os.PathLike, run_id: str) -> Path:
    """A fresh private build directory for one run (``out/runs/.tmp-<id>-<pid>``)."""
    path = Path(out) / RUNS / f".tmp-{run_id}-{os.getpid()}"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def read_record(out: str | os.PathLike, run_id: str) -> dict[str, Any] | None:
    """The marker of a committed run (status ``done`` or ``failed``) merged with its result, else None."""
    from gradlab.io import load_json

    d = run_dir(out, run_id)
    try:
        marker = load_json(d / MARKER)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("status") not in ("done", "failed"):
        return None
    record = dict(marker)
    if marker["status"] == "done":
        try:
            record.update(load_json(d / "result.json"))
        except (OSError, ValueError):
            return None
    record["dir"] = str(d)
    return record


def run_status(out: str | os.PathLike, run_id: str) -> str:
    """``"done"``, ``"failed"`` or ``"missing"`` (no directory, or one without a valid marker)."""
    rec = read_record(out, run_id)
    return "missing" if rec is None else rec["status"]


def commit_run(out: str | os.PathLike, run_id: str, built: Path, marker: dict[str, Any]) -> Path:
    """Write the marker into ``built`` (atomically, last), then rename it to ``runs/<id>``.

    A previous directory of the same id (unfinished, or a failure being retried) is removed first.
    """
    from gradlab.io import save_json_atomic

    save_json_atomic(Path(built) / MARKER, marker)
    final = run_dir(out, run_id)
    if final.exists():
        shutil.rmtree(final)
    os.replace(built, final)
    return final


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process
        return True
    return True


def clean_stale(out: str | os.PathLike) -> int:
    """Remove ``.tmp-<id>-<pid>`` build directories whose process is gone; returns how many."""
    root = Path(out) / RUNS
    n = 0
    if not root.is_dir():
        return 0
    for p in root.glob(".tmp-*-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
            with contextlib.suppress(OSError):
                shutil.rmtree(p)
                n += 1
    return n
