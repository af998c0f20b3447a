"""Overhead of ``ParadigmMonitor.update`` per monitored batch (target: < 20 ms for N = 128, D = 768 on CPU).

Usage:
    python benchmarks/monitor.py [--n 128] [--d 768] [--repeats 50] [--json OUT.json]

Rows (all after compilation; the first call's compile time is reported separately):
  stats only     the jitted statistics on device arrays (no conversion, no record)
  update         monitor.update with NumPy float32 input, no sink (defaults: 5 losses,
                 6 taus, 3 lambdas, baseline margin)
  update+jsonl   the same, appending each record to a JSON Lines file
  update+hist    with histograms of cos θ_ii', cos θ_ij' and the minimum ratio
  update (jax)   JAX array input
  update (dlpack) an object that only speaks DLPack
The median and the 90th percentile over ``--repeats`` calls are printed, with the machine's load.
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
    out.sort()
    return statistics.median(out), out[int(0.9 * (len(out) - 1))]


class _DLPackOnly:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--json", type=str, default=None)
    args = p.parse_args(argv)

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
    print(f"{'row':<18}{'median ms':>12}{'p90 ms':>10}")
    for name, med, p90 in rows:
        print(f"{name:<18}{med * 1e3:>12.2f}{p90 * 1e3:>10.2f}")
    target = dict((r[0], r[1]) for r in rows)["update"] * 1e3
    print(f"target < 20 ms per update: {'met' if target < 20 else 'NOT met'} ({target:.2f} ms median)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS of this process (JAX runtime + compiled monitor + all rows): {peak_mb:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "d": args.d, "repeats": args.repeats, "compile_s": compile_s,
                       "compile_hist_s": compile_hist_s, "load_average": load, "device": str(jax.devices()[0]),
                       "rows": [{"row": r[0], "median_ms": r[1] * 1e3, "p90_ms": r[2] * 1e3} for r in rows]},
                      f, indent=2)


if __name__ == "__main__":
    main()
