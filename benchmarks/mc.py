"""Monte-Carlo GD-map benchmark: a NumPy loop, a plain jax.vmap, gradlab independent and common.

Rows (each measured in its own subprocess, so peak RSS is per row):
  (a) numpy   — a plain per-batch NumPy loop of the paper's protocol, on a reduced grid;
  (b) vmap    — jax.vmap over the grid, per-cell draws, loss.components_from_angles, no shortcuts;
  (c) indep   — gradlab.simulate.gd_map, mode="independent";
  (d) common  — gradlab.simulate.gd_map, mode="common" (the full map is timed directly).
Columns: seconds per cell, seconds for the full paper map (100 × 100 cells × 1000 batches ×
128) — measured for (d), per cell × 10,000 for the others — speed-ups over (a) and (b),
and the row's peak RSS. Times are after compilation (median of repeats).

    python benchmarks/mc.py            # the full table
    python benchmarks/mc.py --quick    # smoke run (small sizes, seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time

LOSSES = ("infonce", "arccon", "mpt", "met")
FULL_CELLS = 100 * 100


def _median_time(fn, repeats):
    fn()  # compile / warm up
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


# --- (a) the plain NumPy loop --------------------------------------------------------------
def _numpy_gd(loss, c_pos, c_neg, params):
    import numpy as np

    if loss in ("infonce", "arccon"):
        tau = params["tau"]
        pos = c_pos / tau if loss == "infonce" else np.cos(np.arccos(np.clip(c_pos, -1, 1)) + params["u"]) / tau
        x = c_neg / tau
        mx = x.max()
        lse = mx + np.log(np.exp(x - mx).sum())
        return 1 / (1 + np.exp(pos - lse))
    c_max = c_neg.max()
    if loss == "mpt":
        return float(c_pos - c_max < params["m"])
    d = lambda c: math.sqrt(max(2 - 2 * c, 0.0))  # noqa: E731
    return float(d(c_max) - d(c_pos) < params["m"])


def row_numpy(loss, grid, batches, n, repeats):
    import numpy as np

    import gradlab

    params = dict(gradlab.get_loss(loss).params)
    mu_pos = np.linspace(math.pi / 20, math.pi / 2, grid)
    mu_neg = np.linspace(math.pi / 20, math.pi, grid)
    rng = np.random.default_rng(0)

    def run():
        out = np.zeros((grid, grid))
        for i, mp in enumerate(mu_pos):
            for j, mn in enumerate(mu_neg):
                acc = 0.0
                for _ in range(batches):
                    tp = rng.normal(mp, 0.05)
                    tn = rng.normal(mn, 0.10, n - 1)
                    acc += _numpy_gd(loss, math.cos(tp), np.cos(tn), params)
                out[i, j] = acc / batches
        return out

    t = _median_time(run, repeats)
    return t / grid**2


# --- (b) a straightforward jax.vmap --------------------------------------------------------
def row_vmap(loss, grid, batches, n, repeats):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import gradlab

    lo = gradlab.get_loss(loss)
    mu_pos = jnp.asarray(np.linspace(math.pi / 20, math.pi / 2, grid), jnp.float32)
    mu_neg = jnp.asarray(np.linspace(math.pi / 20, math.pi, grid), jnp.float32)

    def cell(key, mp, mn):
        z = jax.random.normal(key, (batches, n), jnp.float32)
        comp = lo.components_from_angles(mp + 0.05 * z[:, 0], mn + 0.10 * z[:, 1:])
        return jnp.mean(comp.gd)

    @jax.jit
    def run(seed):
        root = jax.random.key(seed)
        mp, mn = jnp.meshgrid(mu_pos, mu_neg, indexing="ij")
        keys = jax.vmap(lambda c: jax.random.fold_in(root, c))(jnp.arange(grid * grid))
        return jax.vmap(cell)(keys, mp.ravel(), mn.ravel()).reshape(grid, grid)

    t = _median_time(lambda: run(0).block_until_ready(), repeats)
    return t / grid**2


# --- (c), (d) gradlab ----------------------------------------------------------------------
def row_gradlab(loss, mode, grid, batches, n, repeats):
    from gradlab.simulate import Protocol, gd_map

    p = Protocol(grid=grid, batches=batches, batch_size=n, mode=mode)
    t = _median_time(lambda: gd_map(loss, p), repeats)
    return t / grid**2


def child(args):
    if args.row == "a":
        per_cell = row_numpy(args.loss, args.grid, args.batches, args.n, args.repeats)
    elif args.row == "b":
        per_cell = row_vmap(args.loss, args.grid, args.batches, args.n, args.repeats)
    else:
        mode = "independent" if args.row == "c" else "common"
        per_cell = row_gradlab(args.loss, mode, args.grid, args.batches, args.n, args.repeats)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"per_cell": per_cell, "grid": args.grid, "rss_mb": rss_kb / 1024}))


def _measure(row, loss, grid, batches, n, repeats):
    cmd = [sys.executable, __file__, "--child", "--row", row, "--loss", loss, "--grid", str(grid),
           "--batches", str(batches), "--n", str(n), "--repeats", str(repeats)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes")
    ap.add_argument("--losses", default=",".join(LOSSES))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", choices="abcd")
    ap.add_argument("--loss", default="infonce")
    ap.add_argument("--grid", type=int, default=100)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    b, n = (100, 32) if args.quick else (1000, 128)
    # reduced grids for the slow rows; the common row runs the full grid
    grids = {"a": 1 if args.quick else 2, "b": 3 if args.quick else 8, "c": 4 if args.quick else 20,
             "d": 20 if args.quick else 100}
    reps = {"a": 1, "b": 2 if args.quick else 3, "c": 2 if args.quick else 3, "d": 3 if args.quick else 7}
    names = {"a": "(a) NumPy loop", "b": "(b) jax.vmap", "c": "(c) gradlab independent", "d": "(d) gradlab common"}
    print(f"protocol: B={b} batches x N={n}; full map = 100x100 cells; times after compilation (median)")
    print(f"{'loss':8s} {'row':24s} {'grid':>5s} {'s/cell':>10s} {'full map s':>11s} {'x vs (a)':>10s} {'x vs (b)':>9s} {'RSS MB':>7s}")
    for loss in args.losses.split(","):
        res = {r: _measure(r, loss, grids[r], b, n, reps[r]) for r in "abcd"}
        for r in "abcd":
            pc = res[r]["per_cell"]
            full = pc * FULL_CELLS
            print(f"{loss:8s} {names[r]:24s} {grids[r]:5d} {pc:10.3e} {full:11.4g} "
                  f"{res['a']['per_cell'] / pc:10.4g} {res['b']['per_cell'] / pc:9.3g} {res[r]['rss_mb']:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
