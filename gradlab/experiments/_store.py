"""Run directories and leases: ``OUT/runs/<id>/``, safe for several hosts on one shared filesystem.

A run directory holds ``config.json`` (the spec and its id), ``train_log.jsonl``,
``paradigm_monitor.jsonl``, ``train.json`` (the trainer's summary), ``heldout.npz``
(held-out statistics before / after training) and ``result.json`` (best dev, test, ...),
and last ``COMPLETE.json``, the marker: ``{"status": "done" | "failed", ...}``.

Commit protocol: a worker writes everything, the marker last (atomically), into
``runs/.tmp-<id>-<token>/`` and then renames that directory to ``runs/<id>``. A directory
without a marker (a run killed in flight, or anything else) counts as missing and is
redone; a temporary directory is never read. A ``done`` run is never replaced; a previous
directory of the same id (a failure being retried, an unfinished one) is first renamed
aside and removed only after the new directory is in place.

Leases (only atomic creation and rename are assumed of the filesystem, never ``flock``):
a worker claims a run by creating ``runs/.lease-<id>`` with a hard link (which fails if
the file exists), holding its host, pid, start time and a random token; a background
thread rewrites ``runs/.hb-<id>-<token>`` (the heartbeat) every ``lease_period()``
seconds. A lease whose newest heartbeat is older than ``STALE_PERIODS`` periods is
stale: it is renamed aside (one reclaimer wins the rename) and a new lease is created.
Liveness is judged by the heartbeat alone (the clocks of the hosts are assumed to agree
to well within the staleness window, as NTP keeps them); a dead pid on the *same* host
is only a shortcut.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "run_dir", "run_status", "read_record", "commit_run", "clean_stale", "tmp_dir", "Lease",
           "acquire_lease", "read_lease", "run_state", "lease_period", "STALE_PERIODS"]

MARKER = "COMPLETE.json"
RUNS = "runs"
#: A lease whose heartbeat is older than this many periods is stale.
STALE_PERIODS = 6
#: Environment variable: the heartbeat period in seconds (default 5).
ENV_PERIOD = "GRADLAB_LEASE_PERIOD_S"


def lease_period() -> float:
    """Seconds between heartbeats (``GRADLAB_LEASE_PERIOD_S``, default 5)."""
    raw = os.environ.get(ENV_PERIOD, "").strip()
    try:
        value = float(raw) if raw else 5.0
    except ValueError:
        raise ValueError(f"{ENV_PERIOD} must be a number of seconds; got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{ENV_PERIOD} must be > 0; got {raw!r}")
    return value


def run_dir(out: str | os.PathLike, run_id: str) -> Path:
    """``out/runs/<id>``."""
    return Path(out) / RUNS / run_id


def tmp_dir(out: str | os.PathLike, run_id: str, token: str | None = None) -> Path:
    """A fresh private build directory for one run (``out/runs/.tmp-<id>-<token>``)."""
    token = token or uuid.uuid4().hex
    path = Path(out) / RUNS / f".tmp-{run_id}-{token}"
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


def commit_run(out: str | os.PathLike, run_id: str, built: Path, marker: dict[str, Any],
               token: str | None = None) -> Path:
    """Write the marker into ``built`` (atomically, last), then rename it to ``runs/<id>``.

    A committed ``done`` run is never replaced (``built`` is discarded). Any other previous
    directory of the same id is renamed aside first and removed only once the new one is
    in place; if the rename fails, it is put back. A failure anywhere (a full disk) leaves
    either the old directory or the new complete one, never a half-written one.

    Args:
      token: the committing lease's token (names the aside directory, so that ``clean_stale``
        leaves it alone while the lease lives).
    """
    from gradlab.io import save_json_atomic

    built = Path(built)
    save_json_atomic(built / MARKER, marker)
    final = run_dir(out, run_id)
    if run_status(out, run_id) == "done":
        shutil.rmtree(built, ignore_errors=True)
        return final
    old = None
    if final.exists():
        old = final.parent / f".old-{run_id}-{token or uuid.uuid4().hex}"
        os.rename(final, old)
    try:
        os.rename(built, final)
    except BaseException:
        if old is not None:
            with contextlib.suppress(OSError):
                os.rename(old, final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- leases
def _lease_file(out, run_id: str) -> Path:
    return Path(out) / RUNS / f".lease-{run_id}"


def _hb_file(out, run_id: str, token: str) -> Path:
    return Path(out) / RUNS / f".hb-{run_id}-{token}"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_new(path: Path, data: dict[str, Any]) -> None:
    """Create ``path`` holding ``data`` only if it does not exist (FileExistsError otherwise).

    The content is written to a private file first and hard-linked into place, so a reader
    never sees a half-written lease; without hard links, ``O_CREAT | O_EXCL`` does it.
    """
    private = path.with_name(f"{path.name}.new-{data['token']}")
    with open(private, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(private, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(private)


def read_lease(out: str | os.PathLike, run_id: str) -> dict[str, Any] | None:
    """The lease of a run, with ``heartbeat`` (its newest beat, epoch seconds), or None."""
    lease = _load(_lease_file(out, run_id))
    if lease is None or not isinstance(lease.get("token"), str):
        return None
    beat = _load(_hb_file(out, run_id, lease["token"])) or {}
    times = [t for t in (lease.get("start"), beat.get("beat")) if isinstance(t, (int, float))]
    lease["heartbeat"] = max(times) if times else 0.0
    return lease


def _pid_gone(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # pragma: no cover - someone else's process
        return False
    return False


def is_stale(lease: dict[str, Any], now: float | None = None) -> bool:
    """Whether a lease's heartbeat is older than ``STALE_PERIODS`` periods (or, on this host, its
    process is gone)."""
    now = time.time() if now is None else now
    if now - float(lease.get("heartbeat", 0.0)) > STALE_PERIODS * lease_period():
        return True
    return lease.get("host") == socket.gethostname() and _pid_gone(lease.get("pid"))


class Lease:
    """A held claim on one run; a daemon thread renews its heartbeat until :meth:`release`."""

    def __init__(self, out, run_id: str, info: dict[str, Any]):
        self.out, self.run_id, self.info, self.token = Path(out), run_id, info, info["token"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_loop, name=f"gradlab-lease-{run_id}", daemon=True)
        self._beat()
        self._thread.start()

    def _beat(self) -> None:
        from gradlab.io import save_json_atomic

        with contextlib.suppress(OSError):  # a missed beat (full disk) is retried next period
            save_json_atomic(_hb_file(self.out, self.run_id, self.token),
                             {"beat": time.time(), "host": self.info["host"], "pid": self.info["pid"]}, indent=0)

    def _beat_loop(self) -> None:
        while not self._stop.wait(lease_period()):
            self._beat()

    def held(self) -> bool:
        """Whether the lease file still names this lease (False once another worker reclaimed it)."""
        lease = _load(_lease_file(self.out, self.run_id))
        return lease is not None and lease.get("token") == self.token

    def release(self) -> None:
        """Stop the heartbeat and remove the lease (if it is still ours) and its heartbeat file."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self.held():
            with contextlib.suppress(OSError):
                os.unlink(_lease_file(self.out, self.run_id))
        with contextlib.suppress(OSError):
            os.unlink(_hb_file(self.out, self.run_id, self.token))


def _drop_stale(path: Path, held: dict[str, Any], token: str) -> bool:
    """Rename the stale lease ``held`` aside and delete it (and its heartbeat); False if the file
    moved aside was not ``held`` (another worker's fresh lease: it is linked back)."""
    aside = path.with_name(f"{path.name}.reclaimed-{token}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # someone else removed it: try to create ours
    moved = _load(aside)
    if moved is not None and moved.get("token") != held["token"]:
        with contextlib.suppress(OSError):
            os.link(aside, path)  # not the stale lease: put it back
        with contextlib.suppress(OSError):
            os.unlink(aside)
        return False
    with contextlib.suppress(OSError):
        os.unlink(aside)
    with contextlib.suppress(OSError):
        os.unlink(path.with_name(f".hb-{path.name.removeprefix('.lease-')}-{held['token']}"))
    return True


def acquire_lease(out: str | os.PathLike, run_id: str) -> Lease | None:
    """Claim a run: a new :class:`Lease`, or None while another worker holds a live lease.

    A stale lease is renamed aside (only one reclaimer's rename succeeds) and a new one is
    created; if the file moved aside turns out not to be the stale lease judged (another
    reclaimer's fresh one), it is linked back and the claim fails.
    """
    path = _lease_file(out, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    info = {"id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "start": time.time(), "token": token}
    for _ in range(8):
        try:
            _write_new(path, info)
            return Lease(out, run_id, info)
        except FileExistsError:
            pass
        held = read_lease(out, run_id)
        if held is None:
            continue  # released (or being written) meanwhile: try again
        if not is_stale(held) or not _drop_stale(path, held, token):
            return None
        info["start"] = time.time()
    return None


def run_state(out: str | os.PathLike, run_id: str) -> dict[str, Any]:
    """``{"state": "done" | "failed" | "running" | "missing", ...}`` of one run, without changing anything.

    ``failed`` carries ``error``; ``running`` carries ``host``, ``pid`` and ``heartbeat_age``
    (seconds); a ``missing`` run with a stale lease carries ``stale_lease`` (its host).
    """
    rec = read_record(out, run_id)
    if rec is not None:
        return {"state": rec["status"], **({"error": rec.get("error")} if rec["status"] == "failed" else {})}
    lease = read_lease(out, run_id)
    if lease is None:
        return {"state": "missing"}
    info = {"host": lease.get("host"), "pid": lease.get("pid"), "heartbeat_age": time.time() - lease["heartbeat"]}
    if is_stale(lease):
        return {"state": "missing", "stale_lease": info["host"]}
    return {"state": "running", **info}


def clean_stale(out: str | os.PathLike) -> int:
    """Remove stale leases, and build / aside directories and heartbeat files whose run has no live
    lease of their token; returns how many. Never judges a worker by its pid on another host."""
    root = Path(out) / RUNS
    if not root.is_dir():
        return 0
    n = 0
    leases: dict[str, dict[str, Any] | None] = {}

    def live_token(run_id: str) -> str | None:
        if run_id not in leases:
            lease = read_lease(out, run_id)
            leases[run_id] = lease if lease is not None and not is_stale(lease) else None
        return (leases[run_id] or {}).get("token")

    for p in root.glob(".lease-*"):
        held = read_lease(out, p.name[len(".lease-"):])
        if "." not in p.name[1:] and held is not None and is_stale(held) and _drop_stale(p, held, uuid.uuid4().hex):
            n += 1
    for p in root.glob(".*-*"):
        kind, _, rest = p.name[1:].partition("-")
        run_id, _, token = rest.partition("-")
        if kind not in ("tmp", "old", "hb") or not token or live_token(run_id) == token:
            continue
        with contextlib.suppress(OSError):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
            n += 1
    return n
