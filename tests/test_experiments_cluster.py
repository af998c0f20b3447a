"""gradlab.experiments on real separate processes: Dask and submitit executors, leases shared by
two launchers, a worker killed mid-run, stale and fresh leases, a full disk, ``--status``.

The fast tests replace the trainer by a stand-in (``stand_in_train``, numbers a known function
of the configuration, ``tests.test_experiments._fake_dev``) inside every worker process:
``PatchedRun`` is the callable the cluster executors ship, and launcher subprocesses patch
themselves. Waiting is always polling a file with a timeout, never sleeping and hoping.
The slow tests train for real and compare the executors' numbers bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gradlab.experiments import (
    RunSpec,
    _store,
    _worker,
    acquire_lease,
    execute,
    read_lease,
    read_record,
    run_state,
)
from tests._cli import run
from tests.test_experiments import TINY, _fake_dev, needs_real

ROOT = Path(__file__).resolve().parents[1]
SPECS = [RunSpec(loss={"loss": "baseline", "params": {"m": m}}, **TINY) for m in (0.3, 0.5, 0.7)]
NUMBERS = ("best_dev", "best_step", "dev_before", "test_before", "test_after")
TIMEOUT = 120.0


def wait_for(condition, what: str, timeout: float = TIMEOUT, every: float = 0.05):
    """Poll ``condition()`` until it is truthy (returned) or ``timeout`` seconds pass (a failure)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def stand_in_train(spec, build):
    """The stand-in trainer: logs ``<id> <pid> <host>`` to OUT/executions.log; if OUT/gate exists,
    writes OUT/started-<id> and waits for OUT/go (so a test can act while a run is in flight)."""
    out = Path(build).parent.parent
    with open(out / "executions.log", "a", encoding="utf-8") as fh:
        fh.write(f"{spec.id} {os.getpid()} {socket.gethostname()}\n")
    if (out / "gate").exists():
        (out / f"started-{spec.id}").write_text(str(os.getpid()))
        end = time.monotonic() + TIMEOUT
        while not (out / "go").exists() and time.monotonic() < end:
            time.sleep(0.05)
    dev = _fake_dev(spec)
    return {"best_dev": dev, "best_step": spec.steps, "dev_before": 40.0, "test_before": 30.0, "test_after": dev - 5}


class PatchedRun(_worker.RemoteRun):
    """``RemoteRun`` with the stand-in trainer, installed in the worker process that runs it."""

    def __call__(self, *args, **kwargs):
        _worker.train_run = stand_in_train
        _worker.use_compile_cache = lambda directory=None: None
        return super().__call__(*args, **kwargs)


def executions(out: Path) -> list[str]:
    path = out / "executions.log"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def numbers(records: dict) -> dict:
    return {k: tuple(r[n] for n in NUMBERS) for k, r in records.items()}


@pytest.fixture
def child_env(monkeypatch):
    """Worker and launcher processes import ``tests`` (PatchedRun) and beat every 0.2 s."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(_store.ENV_PERIOD, "0.2")


@pytest.fixture
def local_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(_worker, "train_run", stand_in_train)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda directory=None: None)
    recs = execute(SPECS, tmp_path / "local", jobs=1)
    assert [recs[s.id]["best_dev"] for s in SPECS] == [_fake_dev(s) for s in SPECS]  # the stand-in's formula
    return numbers(recs)


# --------------------------------------------------------------------------- executors (fast)
def test_dask_local_cluster_runs_a_study_in_worker_processes(tmp_path, child_env, local_reference):
    distributed = pytest.importorskip("distributed")
    from gradlab.experiments import make_executor

    out = tmp_path / "dask"
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        ex = make_executor("dask", out, options={"address": cluster.scheduler_address, "threads": 1})
        ex.fn = PatchedRun()
        recs = execute(SPECS, out, executor=ex)
    assert numbers(recs) == local_reference
    log = executions(out)
    assert sorted(line.split()[0] for line in log) == sorted(s.id for s in SPECS)  # each run exactly once
    assert str(os.getpid()) not in {line.split()[1] for line in log}  # in the workers, not here
    assert not list(out.glob(".probe-*")) and not list((out / "runs").glob(".lease-*"))


def test_submitit_local_executor_runs_a_study_in_job_processes(tmp_path, child_env, local_reference):
    pytest.importorskip("submitit")
    from gradlab.experiments import make_executor

    out = tmp_path / "submitit"
    ex = make_executor("submitit", out, jobs=2, options={"cluster": "local"})
    ex.fn = PatchedRun()
    recs = execute(SPECS, out, executor=ex)
    assert numbers(recs) == local_reference
    log = executions(out)
    assert sorted(line.split()[0] for line in log) == sorted(s.id for s in SPECS)
    assert str(os.getpid()) not in {line.split()[1] for line in log}
    assert (out / ".submitit").is_dir()


def test_submitit_checkpoint_releases_the_lease_and_resubmits_the_same_call(tmp_path):
    pytest.importorskip("submitit")
    from submitit.helpers import DelayedSubmission

    lease = acquire_lease(tmp_path, SPECS[0].id)
    _worker._HELD[SPECS[0].id] = lease
    try:
        fn = _worker.RemoteRun()
        again = fn.checkpoint(SPECS[0].to_dict(), str(tmp_path), "probe", "off", 1)
    finally:
        _worker._HELD.clear()
    assert isinstance(again, DelayedSubmission) and again.function is fn
    assert again.args == (SPECS[0].to_dict(), str(tmp_path), "probe", "off", 1)
    assert read_lease(tmp_path, SPECS[0].id) is None and not lease.held()  # the requeued job can claim it


@pytest.mark.slow
def test_submitit_job_at_its_time_limit_is_requeued_and_completes(tmp_path, child_env):
    pytest.importorskip("submitit")
    from gradlab.experiments import make_executor

    out = tmp_path / "exp"
    (out / "runs").mkdir(parents=True)
    (out / "gate").write_text("")
    spec = SPECS[0]
    # a 60 s limit; submitit's local executor signals 30 s before it: checkpoint, then requeue
    ex = make_executor("submitit", out, jobs=1, options={"cluster": "local", "timeout_min": 1})
    ex.fn = PatchedRun()
    got = {}
    launcher = threading.Thread(target=lambda: got.update(execute([spec], out, executor=ex)))
    launcher.start()
    try:
        wait_for(lambda: len(executions(out)) >= 2, "the job to be signalled and requeued")
    finally:
        (out / "go").write_text("")
        launcher.join(timeout=TIMEOUT)
    assert got[spec.id]["status"] == "done" and got[spec.id]["best_dev"] == _fake_dev(spec)
    log = executions(out)
    assert {line.split()[0] for line in log} == {spec.id} and len({line.split()[1] for line in log}) == len(log)
    assert read_lease(out, spec.id) is None


def test_missing_extra_and_bad_options_are_one_line_errors(tmp_path):
    from gradlab.experiments import make_executor, parse_executor_option

    assert parse_executor_option("resources=GPU:1,MEM:4e9") == ("resources", {"GPU": 1, "MEM": 4e9})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_executor_option("timeout_min")
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("slurm", tmp_path)
    with pytest.raises(ValueError, match="no options"):
        make_executor("local", tmp_path, options={"threads": 1})
    r = run("experiment", "fig9", "--quick", "--executor", "local", "--executor-opt", "x=1", "--out", tmp_path / "e")
    assert r.exit_code == 2 and "takes no --executor-opt" in r.stderr and not (tmp_path / "e").exists()
    r = run("experiment", "fig9", "--quick", "--scheduler", "tcp://h:1", "--out", tmp_path / "e")
    assert r.exit_code == 2 and "--executor dask" in r.stderr


# --------------------------------------------------------------------------- leases
def _launcher(out: Path, jobs: int = 1) -> subprocess.Popen:
    code = ("import sys; from gradlab.experiments import _worker, execute; "
            "from tests.test_experiments_cluster import SPECS, stand_in_train; "
            "_worker.train_run = stand_in_train; _worker.use_compile_cache = lambda d=None: None; "
            f"recs = execute(SPECS, {str(out)!r}, jobs={jobs}, backoff_s=0); "
            "sys.exit(0 if all(r['status'] == 'done' for r in recs.values()) else 1)")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_launchers_on_one_store_never_run_a_run_twice(tmp_path, child_env):
    out = tmp_path / "exp"
    (out / "runs").mkdir(parents=True)
    (out / "gate").write_text("")
    a, b = _launcher(out), _launcher(out)
    # both launchers have a run in flight at the same time (each holds its own lease) ...
    started = wait_for(lambda: len(list(out.glob("started-*"))) >= 2 and list(out.glob("started-*")),
                       "two runs in flight")
    ids = {p.name.removeprefix("started-") for p in started}
    pids = {int(p.read_text()) for p in started}
    assert len(ids) == 2 and pids == {a.pid, b.pid}
    for rid in ids:
        assert read_lease(out, rid)["pid"] in pids and run_state(out, rid)["state"] == "running"
    (out / "go").write_text("")
    for p in (a, b):
        assert p.wait(timeout=TIMEOUT) == 0, p.stderr.read().decode()
    log = executions(out)
    assert sorted(line.split()[0] for line in log) == sorted(s.id for s in SPECS)  # ... and none ran twice
    assert all(read_record(out, s.id)["best_dev"] == _fake_dev(s) for s in SPECS)


def test_killed_worker_leaves_nothing_and_the_relaunch_completes(tmp_path, child_env, monkeypatch):
    out = tmp_path / "exp"
    (out / "runs").mkdir(parents=True)
    (out / "gate").write_text("")
    victim = _launcher(out)
    (first,) = wait_for(lambda: list(out.glob("started-*")), "a run in flight")
    rid = first.name.removeprefix("started-")
    assert read_lease(out, rid)["pid"] == victim.pid
    os.kill(victim.pid, signal.SIGKILL)  # the worker (here the launcher itself) dies mid-run
    victim.wait(timeout=TIMEOUT)
    assert run_state(out, rid)["state"] == "missing" and list((out / "runs").glob(f".tmp-{rid}-*"))
    (out / "gate").unlink()
    monkeypatch.setattr(_worker, "train_run", stand_in_train)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda directory=None: None)
    recs = execute(SPECS, out, jobs=1)  # the relaunch: the dead worker's lease and build are reclaimed
    assert numbers(recs) == {s.id: (_fake_dev(s), s.steps, 40.0, 30.0, _fake_dev(s) - 5) for s in SPECS}
    assert [line.split()[0] for line in executions(out)].count(rid) == 2  # killed once, redone once
    assert not list((out / "runs").glob(".tmp-*")) and not list((out / "runs").glob(".lease-*"))


def _foreign_lease(out: Path, run_id: str, age: float) -> None:
    (out / "runs").mkdir(parents=True, exist_ok=True)
    lease = {"id": run_id, "host": "node-elsewhere-17", "pid": os.getpid(), "start": time.time() - age,
             "token": "f" * 32}
    (out / "runs" / f".lease-{run_id}").write_text(json.dumps(lease))
    (out / "runs" / f".tmp-{run_id}-{'f' * 32}").mkdir()


def test_stale_foreign_lease_is_reclaimed_fresh_one_respected(tmp_path, monkeypatch):
    monkeypatch.setenv(_store.ENV_PERIOD, "1")
    monkeypatch.setattr(_worker, "train_run", stand_in_train)
    monkeypatch.setattr(_worker, "use_compile_cache", lambda directory=None: None)
    fresh, stale = SPECS[0], SPECS[1]
    _foreign_lease(tmp_path, fresh.id, age=0.0)  # another host, heartbeat now; the pid is a live one here:
    _foreign_lease(tmp_path, stale.id, age=_store.STALE_PERIODS * 1.0 + 30)  # neither is judged by pid
    assert acquire_lease(tmp_path, fresh.id) is None
    assert _worker.run_one(fresh.to_dict(), str(tmp_path))["status"] == "busy"
    st = run_state(tmp_path, fresh.id)
    assert st["state"] == "running" and st["host"] == "node-elsewhere-17" and st["heartbeat_age"] < 30
    assert run_state(tmp_path, stale.id) == {"state": "missing", "stale_lease": "node-elsewhere-17"}
    _store.clean_stale(tmp_path)  # the fresh lease's build directory stays, the stale one's goes
    assert (tmp_path / "runs" / f".tmp-{fresh.id}-{'f' * 32}").is_dir()
    assert not (tmp_path / "runs" / f".tmp-{stale.id}-{'f' * 32}").exists()
    assert read_lease(tmp_path, stale.id) is None and read_lease(tmp_path, fresh.id) is not None
    rec = _worker.run_one(stale.to_dict(), str(tmp_path))
    assert rec["status"] == "done" and rec["best_dev"] == _fake_dev(stale)
    assert read_lease(tmp_path, stale.id) is None  # released after the commit
    assert read_lease(tmp_path, fresh.id)["host"] == "node-elsewhere-17"  # untouched


def test_heartbeat_renews_and_a_reclaimed_lease_is_not_committed(tmp_path, monkeypatch):
    monkeypatch.setenv(_store.ENV_PERIOD, "0.05")
    lease = acquire_lease(tmp_path, "a" * 16)
    try:
        first = read_lease(tmp_path, "a" * 16)["heartbeat"]
        wait_for(lambda: read_lease(tmp_path, "a" * 16)["heartbeat"] > first, "a renewed heartbeat")
        assert acquire_lease(tmp_path, "a" * 16) is None and lease.held()
        # a reclaimer took it over (as it would after the heartbeat stopped): we no longer hold it
        os.rename(tmp_path / "runs" / f".lease-{'a' * 16}", tmp_path / "runs" / "aside")
        other = acquire_lease(tmp_path, "a" * 16)
        assert other is not None and not lease.held()
        other.release()
    finally:
        lease.release()


# --------------------------------------------------------------------------- faults never become results
def test_store_not_visible_to_a_worker_is_a_clear_line(tmp_path):
    rec = _worker.run_one(SPECS[0].to_dict(), str(tmp_path), probe="0123abcd")
    assert rec["status"] == "retry" and not rec["retryable"]
    assert str(tmp_path) in rec["reason"] and socket.gethostname() in rec["reason"] and "\n" not in rec["reason"]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# --------------------------------------------------------------------------- real training (slow)
REAL = [RunSpec(loss="baseline", **{**TINY, "eval_test": False}),
        RunSpec(loss="infonce", **{**TINY, "eval_test": False})]
RESULT_KEYS = ("best_dev", "best_step", "dev_before", "evals", "loss_first", "loss_last", "heldout", "monitor")


def result_numbers(out: Path, specs) -> dict:
    """The numbers of each run's result.json (what the tables are built from)."""
    got = {}
    for s in specs:
        rec = json.loads((out / "runs" / s.id / "result.json").read_text())
        got[s.id] = {k: rec[k] for k in RESULT_KEYS}
    return got


@pytest.fixture
def real_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADLAB_CACHE_DIR", str(tmp_path / "jax-cache"))
    monkeypatch.setenv(_store.ENV_PERIOD, "0.5")


@pytest.mark.slow
@needs_real
def test_dask_and_submitit_train_bit_for_bit_like_the_local_pool(tmp_path, real_env):
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("submitit")
    local = execute(REAL, tmp_path / "local", jobs=2)  # spawned one-thread workers
    assert all(r["status"] == "done" for r in local.values()), local
    want = result_numbers(tmp_path / "local", REAL)
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        recs = execute(REAL, tmp_path / "dask", executor="dask",
                       executor_options={"address": cluster.scheduler_address, "threads": 1})
    assert all(r["status"] == "done" for r in recs.values()), recs
    assert result_numbers(tmp_path / "dask", REAL) == want
    recs = execute(REAL, tmp_path / "submitit", jobs=2, executor="submitit", executor_options={"cluster": "local"})
    assert all(r["status"] == "done" for r in recs.values()), recs
    assert result_numbers(tmp_path / "submitit", REAL) == want


@pytest.mark.slow
@needs_real
def test_dask_worker_killed_mid_run_is_rescheduled_with_identical_numbers(tmp_path, real_env):
    distributed = pytest.importorskip("distributed")
    spec = REAL[:1]
    execute(spec, tmp_path / "local", jobs=2)
    out = tmp_path / "dask"
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        got = {}
        launcher = threading.Thread(target=lambda: got.update(execute(
            spec, out, executor="dask", executor_options={"address": cluster.scheduler_address, "threads": 1})))
        launcher.start()
        lease = wait_for(lambda: read_lease(out, spec[0].id), "the run's lease", timeout=300)
        assert lease["pid"] != os.getpid()
        os.kill(lease["pid"], signal.SIGKILL)  # the worker training it dies; Dask reschedules the task
        launcher.join(timeout=600)
    assert got[spec[0].id]["status"] == "done", got
    assert result_numbers(out, spec) == result_numbers(tmp_path / "local", spec)


# --------------------------------------------------------------------------- the extra and the cache
def test_plain_import_never_loads_the_cluster_packages():
    code = ("import sys, gradlab, gradlab.experiments as ge; ge.run_study, ge.make_executor, ge.execute; "
            "print(sorted(m for m in ('submitit', 'distributed', 'dask') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("executor, module", [("submitit", "submitit"), ("dask", "distributed")])
def test_a_missing_extra_is_one_line_naming_the_install(tmp_path, monkeypatch, executor, module):
    from gradlab.experiments import make_executor

    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ValueError, match=r'pip install "gradlab\[cluster\]"'):
        make_executor(executor, tmp_path)
    r = run("experiment", "fig9", "--quick", "--executor", executor, "--out", tmp_path / "e")
    assert r.exit_code == 2 and 'pip install "gradlab[cluster]"' in r.stderr and "\n" not in r.stderr.strip()
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("setting", ["dir", "off", "enabled"])
def test_workers_get_the_launchers_compilation_cache(tmp_path, monkeypatch, setting):
    from gradlab import _cache

    seen = []
    # the cache this process switched on (gradlab.enable_cache, as the CLI does) wins over the variable
    monkeypatch.setitem(_cache._ACTIVE, "dir", tmp_path / "enabled" if setting == "enabled" else None)
    monkeypatch.setitem(_cache._ACTIVE, "off", False)
    monkeypatch.setattr(_worker, "train_run", stand_in_train)
    monkeypatch.setattr(_worker, "use_compile_cache", seen.append)
    monkeypatch.setenv("GRADLAB_CACHE_DIR", str(tmp_path / "shared-cache") if setting == "dir" else "off")
    execute(SPECS[:1], tmp_path / "exp", jobs=1)
    assert seen == [{"dir": str(tmp_path / "shared-cache"), "off": "off", "enabled": str(tmp_path / "enabled")}[setting]]
    assert not (tmp_path / "exp" / ".jax_cache").exists()
    monkeypatch.setitem(_cache._ACTIVE, "off", True)  # gradlab --no-cache: the workers go without too
    execute(SPECS[1:2], tmp_path / "exp", jobs=1)
    assert seen[-1] == "off"


@pytest.mark.slow
@needs_real
def test_local_pool_worker_killed_mid_run_is_retried_in_the_same_launch(tmp_path, real_env):
    spec = REAL[:1]
    execute(spec, tmp_path / "reference", jobs=2)
    out = tmp_path / "exp"
    got = {}
    launcher = threading.Thread(target=lambda: got.update(execute(spec, out, jobs=2, backoff_s=0)))
    launcher.start()
    lease = wait_for(lambda: read_lease(out, spec[0].id), "the run's lease", timeout=300)
    assert lease["pid"] != os.getpid()
    os.kill(lease["pid"], signal.SIGKILL)  # BrokenProcessPool: a fresh pool redoes the run
    launcher.join(timeout=600)
    assert got[spec[0].id]["status"] == "done", got
    assert result_numbers(out, spec) == result_numbers(tmp_path / "reference", spec)
