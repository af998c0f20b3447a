"""Overhead of ``ParadigmMonitor.update`` per monitored batch (target: <= 5 ms for N = 128, D = 768 on CPU).

Usage:
    python benchmarks/monitor.py [--n 128] [--d 768] [--repeats 50] [--json OUT.json]
    python benchmarks/monitor.py --big 4096 32768     # large global batches, row blocks

Rows (all after compilation; the first call's compile time is reported separately):
  stats only     the jitted statistics on device arrays (no conversion, no record)
  update         monitor.update with NumPy float32 input, no sink (defaults: 5 losses,
                 6 taus, 3 lambdas, baseline margin, RankMe / α-ReQ window of 4,096
                 rows, computed on a worker thread every 32 updates)
  update (no RankMe) the same with rankme_window=None
  update+jsonl   the same, appending each record to a JSON Lines file
  update+hist    with histograms of cos θ_ii', cos θ_ij' and the minimum ratio
  update (jax)   JAX array input
  update (dlpack) an object that only speaks DLPack
The median, the 90th percentile and the mean over ``--repeats`` calls are printed, with the
machine's load. ``--interleaved ROUNDS``: instead, the statistics and ``update`` with and
without the RankMe window, called in turn in each round (so that they share whatever load
the machine has); min, quartile, median and mean per row.

``--big N ...``: one row per N (each in its own process, for its own peak RSS): the
default monitor (``--minimal``: InfoNCE, one τ, one λ) on one batch of N pairs (D = ``--d``), measured in row blocks of 256
anchors, so no (N, N) matrix exists (checked in the compiled program); the time of one
update after compilation, the compile time, the peak RSS, and what one dense (N, N)
float32 matrix would take.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time

import numpy as np


def _time(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    mean = statistics.fmean(out)
    out.sort()
    return statistics.median(out), out[int(0.9 * (len(out) - 1))], mean


MINIMAL = dict(losses=("infonce",), ratio_losses=(), taus=(0.05,), lambdas=(0.5,))


def _big_row(n, d, repeats, minimal=False):
    """One large batch in this process: compile, then time ``repeats`` updates."""
    import jax

    from gradlab.monitor import ParadigmMonitor

    rng = np.random.default_rng(0)
    h = rng.normal(size=(n, d)).astype(np.float32)
    hp = (h + 0.7 * rng.normal(size=h.shape)).astype(np.float32)
    mon = ParadigmMonitor(**(MINIMAL if minimal else {}))
    hlo = mon._fn.lower(h, hp).compile().as_text()
    t0 = time.perf_counter()
    rec = mon.update(0, h, hp)
    first = time.perf_counter() - t0
    times = []
    for step in range(1, repeats + 1):
        t0 = time.perf_counter()
        rec = mon.update(step, h, hp)
        times.append(time.perf_counter() - t0)
    mon.close()
    return {"n": n, "d": d, "config": "minimal" if minimal else "default", "first_s": first, "update_s": statistics.median(times),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "dense_nn_mb": 4 * n * n / 2**20, "nn_in_program": f"[{n},{n}]" in hlo,
            "valid": rec["valid"], "mu_neg": rec["mu_neg"], "gd_infonce": rec["gd_mean"]["infonce"],
            "rankme": rec["rankme"], "load_average": os.getloadavg(), "device": str(jax.devices()[0])}


def big(ns, d, repeats, json_out=None, minimal=False):
    import subprocess
    import sys

    rows = []
    for n in ns:
        code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                f"import monitor; print(json.dumps(monitor._big_row({n}, {d}, {repeats}, {minimal})))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"N = {n:>6}, D = {d}, {r['config']} configuration: update {r['update_s']:.2f} s (first call with compile "
              f"{r['first_s']:.2f} s), peak RSS {r['peak_rss_mb']:.0f} MB, one dense N×N float32 "
              f"{r['dense_nn_mb']:.0f} MB, N×N in the compiled program: {r['nn_in_program']}, "
              f"load {r['load_average']}", flush=True)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(rows, f, indent=2)


class _DLPackOnly:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def interleaved(n, d, rounds):
    import jax
    import jax.numpy as jnp

    from gradlab.monitor import ParadigmMonitor

    rng = np.random.default_rng(0)
    h = rng.normal(size=(n, d)).astype(np.float32)
    hp = (h + 0.7 * rng.normal(size=h.shape)).astype(np.float32)
    on, off = ParadigmMonitor(), ParadigmMonitor(rankme_window=None)
    hj, hpj = jnp.asarray(h), jnp.asarray(hp)
    rows = {"statistics only": lambda: jax.block_until_ready(off._fn(hj, hpj)),
            "update, RankMe on": lambda: on.update(0, h, hp),
            "update, RankMe off": lambda: off.update(0, h, hp)}
    times = {k: [] for k in rows}
    for fn in rows.values():
        fn()
    for _ in range(rounds):
        for k, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    on.close()
    print(f"N = {n}, D = {d}, {rounds} interleaved rounds, load average {os.getloadavg()}, "
          f"RankMe windows skipped while busy: {on.window.skipped}")
    for k, t in times.items():
        t.sort()
        print(f"{k:<20} min {t[0] * 1e3:7.2f}  q25 {t[len(t) // 4] * 1e3:7.2f}  median "
              f"{statistics.median(t) * 1e3:7.2f}  mean {statistics.fmean(t) * 1e3:7.2f} ms")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--json", type=str, default=None)
    p.add_argument("--big", type=int, nargs="+", default=None, help="large N rows instead (e.g. 4096 32768)")
    p.add_argument("--big-repeats", type=int, default=1)
    p.add_argument("--interleaved", type=int, default=None, metavar="ROUNDS")
    p.add_argument("--minimal", action="store_true",
                   help="--big rows with one loss (InfoNCE), one τ, one λ instead of the default configuration")
    args = p.parse_args(argv)
    if args.big:
        return big(args.big, args.d, args.big_repeats, args.json, args.minimal)
    if args.interleaved:
        return interleaved(args.n, args.d, args.interleaved)

    import jax
    import jax.numpy as jnp

    from gradlab.monitor import ParadigmMonitor

    rng = np.random.default_rng(0)
    h = rng.normal(size=(args.n, args.d)).astype(np.float32)
    hp = (h + 0.7 * rng.normal(size=h.shape)).astype(np.float32)

    rows = []
    mon = ParadigmMonitor(sink=None)
    t0 = time.perf_counter()
    mon.update(0, h, hp)
    compile_s = time.perf_counter() - t0
    hj, hpj = jnp.asarray(h), jnp.asarray(hp)
    fn = mon._fn
    jax.block_until_ready(fn(hj, hpj))
    rows.append(("stats only", *_time(lambda: jax.block_until_ready(fn(hj, hpj)), args.repeats)))
    rows.append(("update", *_time(lambda: mon.update(0, h, hp), args.repeats)))
    monr = ParadigmMonitor(sink=None, rankme_window=None)
    monr.update(0, h, hp)
    rows.append(("update (no RankMe)", *_time(lambda: monr.update(0, h, hp), args.repeats)))
    with tempfile.TemporaryDirectory() as d:
        monj = ParadigmMonitor(sink=os.path.join(d, "m.jsonl"))
        monj.update(0, h, hp)
        rows.append(("update+jsonl", *_time(lambda: monj.update(0, h, hp), args.repeats)))
        monj.close()
    monh = ParadigmMonitor(sink=None, histograms=True)
    t0 = time.perf_counter()
    monh.update(0, h, hp)
    compile_hist_s = time.perf_counter() - t0
    rows.append(("update+hist", *_time(lambda: monh.update(0, h, hp), args.repeats)))
    rows.append(("update (jax)", *_time(lambda: mon.update(0, hj, hpj), args.repeats)))
    dh, dhp = _DLPackOnly(h), _DLPackOnly(hp)
    rows.append(("update (dlpack)", *_time(lambda: mon.update(0, dh, dhp), args.repeats)))

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"ParadigmMonitor overhead, N = {args.n}, D = {args.d}, {args.repeats} calls each")
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), cpus: {os.cpu_count()}, "
          f"load average: {load}, jax {jax.__version__}, {platform.processor() or platform.machine()}")
    print(f"first call (compile + run): {compile_s:.2f} s; with histograms: {compile_hist_s:.2f} s")
    print(f"{'row':<20}{'median ms':>12}{'p90 ms':>10}{'mean ms':>10}")
    for name, med, p90, mean in rows:
        print(f"{name:<20}{med * 1e3:>12.2f}{p90 * 1e3:>10.2f}{mean * 1e3:>10.2f}")
    target = dict((r[0], r[1]) for r in rows)["update"] * 1e3
    print(f"target <= 5 ms per update: {'met' if target <= 5 else 'NOT met'} ({target:.2f} ms median)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS of this process (JAX runtime + compiled monitor + all rows): {peak_mb:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "d": args.d, "repeats": args.repeats, "compile_s": compile_s,
                       "compile_hist_s": compile_hist_s, "load_average": load, "device": str(jax.devices()[0]),
                       "rows": [{"row": r[0], "median_ms": r[1] * 1e3, "p90_ms": r[2] * 1e3, "mean_ms": r[3] * 1e3}
                                for r in rows]},
                      f, indent=2)


if __name__ == "__main__":
    main()
