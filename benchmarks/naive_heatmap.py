"""The ArcCon GD map as a researcher would first write it: one ``jax.vmap`` over the grid, no gradlab.

The baseline of ``benchmarks/latency.py`` ("naive vmap script"): the same map as ``gradlab heatmap
--loss arccon`` (Li et al. 2024 Fig. 2 at the paper's protocol: 100 × 100 cells of (μ_pos,
μ_neg), 1000 batches of N = 128 per cell, σ_pos = 0.05, σ_neg = 0.10, τ = 0.05, u = π/18),
written from the paper's formula with fresh normal draws per cell, jitted once and run row by
row (``lax.map`` over μ_pos, ``vmap`` over μ_neg, so that a row's draws fit in memory). ArcCon's
gradient dissipation (Li et al. 2024 Table 1) is

    GD = 1 / (1 + exp(cos(θ_ii' + u)/τ) / S),  S = Σ_j exp(cos θ_ij' / τ).

It writes ``OUT/naive_arccon_gd.npz`` (mean GD per cell). Run it as a whole process:

    python benchmarks/naive_heatmap.py --out /tmp/naive
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

GRID, BATCHES, N = 100, 1000, 128
SIGMA_POS, SIGMA_NEG, TAU, U = 0.05, 0.10, 0.05, math.pi / 18


def gd_cell(key, mu_pos, mu_neg):
    """Mean ArcCon GD of one cell over its batches, from fresh draws."""
    z = jax.random.normal(key, (BATCHES, N), jnp.float32)
    theta_pos = mu_pos + SIGMA_POS * z[:, 0]
    theta_neg = mu_neg + SIGMA_NEG * z[:, 1:]
    logit_neg = jnp.cos(theta_neg) / TAU
    log_s = jax.nn.logsumexp(logit_neg, axis=-1)
    gd = jax.nn.sigmoid(log_s - jnp.cos(theta_pos + U) / TAU)  # 1 / (1 + e^{c+/τ} / S)
    return jnp.mean(gd)


@jax.jit
def gd_map(seed):
    mu_pos = jnp.linspace(math.pi / 20, math.pi / 2, GRID, dtype=jnp.float32)
    mu_neg = jnp.linspace(math.pi / 20, math.pi, GRID, dtype=jnp.float32)
    root = jax.random.key(seed)

    def row(i):
        keys = jax.vmap(lambda j: jax.random.fold_in(root, i * GRID + j))(jnp.arange(GRID))
        return jax.vmap(gd_cell, in_axes=(0, None, 0))(keys, mu_pos[i], mu_neg)

    return jax.lax.map(row, jnp.arange(GRID))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "naive_arccon_gd.npz", mean=np.asarray(gd_map(args.seed)))


if __name__ == "__main__":
    main()
