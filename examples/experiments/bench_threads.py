"""Does limiting XLA / BLAS to one thread per worker help when ``gradlab experiment --jobs J`` runs
J runs at once? A stand-in for one light-encoder run (no data files needed): a (V, 384) token
table, mean pooling, a trainable 384×384 projection, the Eq. 5 baseline loss on two dropout
views, Adam; ``STEPS`` jitted steps of a batch of 64 sentences of 32 tokens.

    python examples/experiments/bench_threads.py            # prints one JSON line per setting

Settings, each on the CPUs this process may use (``taskset -c 0,1 python ...`` mimics 2 cores):
``J=1 default threads``, ``J=2 default threads`` (both processes let XLA use every core) and
``J=2 one thread each`` (what ``--jobs 2`` does). Each J=2 setting runs two processes at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from gradlab.threads import thread_env

STEPS = 300
ONE_THREAD = thread_env(1, {})  # what a --jobs worker sets (gradlab.threads.limit_threads(1))


def one_run(seed: int) -> float:
    """Seconds for STEPS training steps (after one compile step)."""
    import jax
    import jax.numpy as jnp
    import optax

    from gradlab.losses import get_loss

    loss = get_loss("baseline", m=4.0)  # gate always open: every step does the full work
    k = jax.random.key(seed)
    table = jax.random.normal(k, (30522, 384), jnp.float32)
    params = {"w": jnp.eye(384, dtype=jnp.float32), "b": jnp.zeros(384, jnp.float32)}
    opt = optax.adam(1e-3)
    state = opt.init(params)

    def views(p, ids, key):
        k1, k2 = jax.random.split(key)
        out = []
        for kk in (k1, k2):
            x = table[ids]
            x = jnp.where(jax.random.bernoulli(kk, 0.9, x.shape), x / 0.9, 0.0)
            out.append(x.mean(1) @ p["w"] + p["b"])
        return loss(*out)

    @jax.jit
    def step(p, s, ids, key):
        v, g = jax.value_and_grad(views)(p, ids, key)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    ids = jax.random.randint(k, (STEPS + 1, 64, 32), 0, 30522)
    params, state, v = step(params, state, ids[0], k)
    v.block_until_ready()
    t0 = time.perf_counter()
    for i in range(1, STEPS + 1):
        params, state, v = step(params, state, ids[i], jax.random.fold_in(k, i))
    v.block_until_ready()
    return time.perf_counter() - t0


def _spawn(env_extra: dict[str, str], seed: int) -> subprocess.Popen:
    env = {**os.environ, **env_extra}
    return subprocess.Popen([sys.executable, __file__, "--child", str(seed)], env=env, stdout=subprocess.PIPE,
                            text=True)


def setting(jobs: int, one_thread: bool) -> dict:
    t0 = time.perf_counter()
    procs = [_spawn(ONE_THREAD if one_thread else {}, s) for s in range(jobs)]
    child = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return {"jobs": jobs, "one_thread": one_thread, "cpus": len(os.sched_getaffinity(0)), "steps_per_run": STEPS,
            "wall_s": round(time.perf_counter() - t0, 2), "train_s_per_run": [round(c, 2) for c in child],
            "runs_per_min": round(60 * jobs / max(child), 2)}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(one_run(int(sys.argv[2])))
    else:
        for jobs, one in ((1, False), (2, False), (2, True)):
            print(json.dumps(setting(jobs, one)), flush=True)
