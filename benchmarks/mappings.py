"""How many memory mappings a process's compiled programs hold, against Linux's limit.

    python benchmarks/mappings.py --json benchmarks/results/mappings_cpu.json

XLA on a CPU maps each compiled program into the process in pieces; Linux limits one process's
mappings (``vm.max_map_count``), and the compilation that passes the limit crashes the process.
One fresh process counts ``/proc/self/maps``:

* ``programs``: PROGRAMS small jitted functions of distinct shapes compiled and kept; then the
  functions deleted; then ``jax.clear_caches()``: mappings per program at each point;
* ``training``: ``gradlab.real.train`` on the tiny BERT test fixture (one step, no evaluation),
  run after run in one process: InfoNCE at τ 0.05 twice, then τ 0.1 and 0.2, then ArcCon:
  the mappings after each run (a run that repeats a configuration reuses its programs; each new
  loss or τ compiles its own step);
* ``relieved``: ``jax.clear_caches()``, what ``train`` does first past half the limit (with the
  program store's loaded programs, which a library process does not use): the mappings left.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real  # noqa: E402 - versions, write_json

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = 200
RUNS = [("infonce", 0.05), ("infonce", 0.05), ("infonce", 0.1), ("infonce", 0.2), ("arccon", None)]


def count() -> int:
    with open("/proc/self/maps", "rb") as fh:
        return sum(1 for _ in fh)


def programs() -> dict:
    import jax
    import jax.numpy as jnp

    start = count()
    fns = []
    for i in range(PROGRAMS):
        f = jax.jit(lambda x, i=i: jnp.sin(x) * i + jnp.cos(x) ** 2)
        f(jnp.ones(3 + i)).block_until_ready()
        fns.append(f)
    kept = count()
    del fns
    gc.collect()
    deleted = count()
    jax.clear_caches()
    gc.collect()
    cleared = count()
    per = lambda n: round((n - start) / PROGRAMS, 2)  # noqa: E731
    return {"programs": PROGRAMS, "per_program_kept": per(kept), "per_program_functions_deleted": per(deleted),
            "per_program_after_clear_caches": per(cleared)}


def training() -> dict:
    import jax

    from gradlab.real import TrainConfig, train

    sentences = [f"sentence number {i} says something about {w}." for i, w in
                 enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 3)]
    runs = []
    for loss, tau in RUNS:
        t0 = time.perf_counter()
        cfg = TrainConfig(encoder=str(ROOT / "tests" / "fixtures" / "hf" / "bert"), steps=1, batch_size=8,
                          eval_every=0, dev_pairs=20, loss=loss, loss_params={} if tau is None else {"tau": tau})
        train(cfg, sentences=sentences)
        gc.collect()
        runs.append({"loss": loss, "tau": tau, "mappings": count(), "seconds": round(time.perf_counter() - t0, 2)})
    jax.clear_caches()
    gc.collect()
    return {"runs": runs, "relieved": count()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    with open("/proc/sys/vm/max_map_count") as fh:
        limit = int(fh.read())
    out = {"max_map_count": limit, "at_start": count(), **programs(), "training": training(),
           "machine": platform.machine(), "versions": real.versions(sys.executable)}
    print(f"vm.max_map_count {limit}; at start {out['at_start']} mappings")
    print(f"{PROGRAMS} small programs: {out['per_program_kept']} mappings each while kept, "
          f"{out['per_program_functions_deleted']} once their functions are deleted, "
          f"{out['per_program_after_clear_caches']} after jax.clear_caches()")
    for r in out["training"]["runs"]:
        tau = "" if r["tau"] is None else f" τ {r['tau']}"
        print(f"after {r['loss']}{tau}: {r['mappings']} mappings ({r['seconds']} s)")
    print(f"relieved: {out['training']['relieved']} mappings")
    if args.json:
        real.write_json(args.json, out)


if __name__ == "__main__":
    main()
