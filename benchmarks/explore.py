"""The live explorer's latency: from a slider change to the new maps in the page's data sources.

``gradlab.explore.Explorer`` at the live protocol (50 × 50 cells, 200 batches of 128), in this
process: each row moves one slider back and forth ``--repeat`` times (a new value each time, so
nothing comes from the maps' cache) and times ``slider.value = v`` until its callback has put the
recomputed maps into the Bokeh sources (what the server then sends to the browser). The first
view of each loss (compilation) is not timed. The target is 150 ms per change.

    python benchmarks/explore.py
    python benchmarks/explore.py --repeat 20 --grid 50 --batches 200 --batch-size 128
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

TARGET_MS = 150.0
#: (loss, slider) rows: every kind of slider of the page (a loss parameter, r, λ).
ROWS = [("infonce", "tau"), ("arccon", "tau"), ("arccon", "u"), ("met", "m"),
        ("compose:gd=indicator,weight=softmax,ratio=static", "m"), ("compose:gd=indicator,weight=softmax,ratio=static", "r"),
        ("infonce", "r"), ("infonce", "lam")]


def _values(spec, n: int) -> list[float]:
    """n distinct slider values around the start, on the slider's steps."""
    values, k = [], 1
    while len(values) < n:
        for sign in (1, -1):
            v = round(spec.value + sign * k * spec.step, 10)
            if spec.start <= v <= spec.end and len(values) < n:
                values.append(v)
        k += 1
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--grid", type=int, default=50)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args()
    from gradlab.explore import Explorer, slider_specs

    load0 = os.getloadavg()
    print(f"gradlab explore: slider -> new maps, {args.grid} x {args.grid} grid, {args.batches} batches of "
          f"{args.batch_size}, {os.cpu_count()} CPUs; load average at start {load0[0]:.2f}")
    print(f"{'loss':<48} {'slider':<7} {'median ms':>9} {'p90 ms':>7} {'max ms':>7}  target")
    explorers = {}
    for loss, name in ROWS:
        if loss not in explorers:
            explorers[loss] = Explorer(loss, grid=args.grid, batches=args.batches, batch_size=args.batch_size)
        ex = explorers[loss]
        spec = {s.name: s for s in slider_specs(ex.view)}[name]
        times = []
        for v in _values(spec, args.repeat):
            t0 = time.perf_counter()
            ex.set(**{name: v})
            times.append(1e3 * (time.perf_counter() - t0))
        times.sort()
        med, p90 = statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]
        verdict = "ok" if med <= TARGET_MS else "OVER"
        print(f"{loss:<48} {name:<7} {med:9.1f} {p90:7.1f} {times[-1]:7.1f}  <= {TARGET_MS:.0f} ({verdict})")
    load1 = os.getloadavg()
    print(f"load average at end {load1[0]:.2f} (1 min), {load1[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
