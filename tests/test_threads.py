"""``gradlab.threads.limit_threads``: N threads for XLA (CPU) and BLAS, measured in a child process.

Two witnesses from the kernel's own account (``/proc/self/task``), whatever else the machine runs:
the threads of XLA's intra-op pool (named ``tf_XLAEigen``), N of them whatever the core count (3 on
a 2-core machine; without the limit, one per core), and the threads that did a share of a parallel
workload (a jitted matmul), from each thread's CPU ticks: one with ``limit_threads(1)``, several
without the limit (the witness that the measure can fail) and with ``limit_threads(2)``. (The
calling thread may take part in the work beside the pool, so N = 2 keeps at least 2 busy, not
exactly 2.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradlab.threads import BLAS_VARIABLES, limit_threads, thread_env

CHILD = r"""
import json, os, sys
threads = int(sys.argv[1])
if threads:
    from gradlab.threads import limit_threads
    limit_threads(threads)

def ticks():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return out

import jax, jax.numpy as jnp
x = jnp.ones((1200, 1200), jnp.float32)
f = jax.jit(lambda a: jnp.tanh(a @ a).sum())
f(x).block_until_ready()
before = ticks()
for _ in range(10):
    f(x).block_until_ready()
after = ticks()
spent = [after[t] - before.get(t, 0) for t in after]
busy = sum(1 for s in spent if s > 0.1 * sum(spent))
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(json.dumps({"busy": busy, "pool": names.count("tf_XLAEigen"), "env": {k: os.environ.get(k) for k in ("PJRT_NPROC", "XLA_FLAGS", "OMP_NUM_THREADS")}}))
"""

needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread CPU time from /proc (Linux)")


def _busy_threads(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC", "XLA_FLAGS", *BLAS_VARIABLES)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thread_env_names_every_library():
    assert thread_env(3, {}) == {"PJRT_NPROC": "3", "OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3",
                                 "MKL_NUM_THREADS": "3"}
    assert thread_env(1, {})["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"
    assert thread_env(1, {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true"}).get("XLA_FLAGS") is None  # the user's wins
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be an integer >= 1"):
            thread_env(bad, {})


def test_limit_threads_sets_this_process_environment(monkeypatch):
    for var in ("PJRT_NPROC", "XLA_FLAGS", *BLAS_VARIABLES):
        monkeypatch.delenv(var, raising=False)
    limit_threads(4)
    assert os.environ["PJRT_NPROC"] == "4" and os.environ["OPENBLAS_NUM_THREADS"] == "4"
    assert "XLA_FLAGS" not in os.environ


@needs_proc
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell 1 thread from 2")
def test_xla_uses_as_many_threads_as_asked():
    cores = len(os.sched_getaffinity(0))
    unlimited = _busy_threads(0)
    assert unlimited["busy"] >= 2 and unlimited["pool"] == cores, unlimited  # the witnesses
    one = _busy_threads(1)
    assert one["busy"] == 1 and one["pool"] == 1 and one["env"]["PJRT_NPROC"] == "1", one
    assert one["env"]["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false"
    two = _busy_threads(2)
    assert two["busy"] >= 2 and two["pool"] == 2, two
    assert two["env"] == {"PJRT_NPROC": "2", "XLA_FLAGS": None, "OMP_NUM_THREADS": "2"}, two
    more = _busy_threads(cores + 1)
    assert more["pool"] == cores + 1, more  # N, not the core count
