"""Executor overhead: one study on the local pool, a 2-worker Dask LocalCluster and submitit's
local executor, side by side in one invocation.

Each executor runs the same runs into its own fresh store, with 2 workers of one XLA thread
each, after one warm-up run has filled a shared compilation cache (so no executor pays the
compilations). Printed per executor: the wall time of ``execute``, the sum of the runs' own
seconds (``COMPLETE.json``), the overhead ``wall − Σ run seconds / 2`` (what the engine adds
beyond two perfectly packed workers, in seconds and as a share of the wall time), and the wall
time relative to the local pool. Needs the ``cluster`` and ``real`` extras.

    python benchmarks/cluster.py              # fig6 --quick: 8 runs of 20 steps
    python benchmarks/cluster.py --runs 4     # the first 4 of them
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def _study(runs: int | None):
    from gradlab.experiments import Scale, study_runs

    specs = list({s.id: s for s in study_runs("fig6", Scale.make(quick=True))}.values())
    return specs[:runs] if runs else specs


def _timed(specs, out: Path, executor: str, options: dict) -> dict:
    from gradlab.experiments import execute

    t0 = time.perf_counter()
    recs = execute(specs, out, jobs=2, executor=executor, executor_options=options, retries=0)
    wall = time.perf_counter() - t0
    bad = {k: r.get("error") for k, r in recs.items() if r["status"] != "done"}
    if bad:
        raise SystemExit(f"{executor}: runs not done: {bad}")
    busy = sum(json.loads((out / "runs" / s.id / "COMPLETE.json").read_text())["seconds"] for s in specs)
    return {"wall": wall, "busy": busy, "overhead": wall - busy / 2,
            "best_dev": [recs[s.id]["best_dev"] for s in specs]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="only the first K runs of fig6 --quick")
    args = parser.parse_args(argv)
    import distributed

    with tempfile.TemporaryDirectory(prefix="gradlab-cluster-bench-") as tmp:
        root = Path(tmp)
        os.environ["GRADLAB_CACHE_DIR"] = str(root / "jax-cache")  # one cache, inherited by every worker
        specs = _study(args.runs)
        from gradlab.experiments import execute

        execute(specs[:1], root / "warm-up", jobs=2)  # compiles once into the shared cache
        rows = {"local": _timed(specs, root / "local", "local", {})}
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as cluster:
            rows["dask (LocalCluster, 2 workers)"] = _timed(
                specs, root / "dask", "dask", {"address": cluster.scheduler_address, "threads": 1})
        rows["submitit (local executor)"] = _timed(specs, root / "submitit", "submitit",
                                                   {"cluster": "local", "poll_s": 0.2})
    base = rows["local"]["wall"]
    print(f"fig6 --quick: {len(specs)} runs, 2 workers, load average {os.getloadavg()[0]:.2f}")
    print(f"{'executor':<32} {'wall s':>8} {'Σ run s':>8} {'overhead s':>11} {'overhead %':>11} {'vs local':>9}")
    for name, r in rows.items():
        print(f"{name:<32} {r['wall']:8.1f} {r['busy']:8.1f} {r['overhead']:11.1f} "
              f"{100 * r['overhead'] / r['wall']:10.1f}% {r['wall'] / base:8.2f}x")
    same = all(r["best_dev"] == rows["local"]["best_dev"] for r in rows.values())
    print(f"best dev identical across executors: {same}")


if __name__ == "__main__":
    main()
