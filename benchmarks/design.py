"""User-loss simulation benchmark: a loss written as a function of the cosines, factored vs direct.

Rows, measured side by side in one process (same protocol, float32, times after compilation,
median of repeats): for InfoNCE and MPT,
  registered/factored  — the built-in loss, its factored fast path;
  registered/direct    — the built-in loss, the whole (B, N − 1) table per cell;
  user/factored        — the same loss via gradlab.loss_from_cosines(neg_reduction=...), autodiff kernel;
  user/direct          — the same user loss without the declaration (the direct path).
Plus the focal InfoNCE of examples/design_a_loss.py and one composition, both paths.

    python benchmarks/design.py            # grid 100, 1000 batches, N = 128 (the paper's map)
    python benchmarks/design.py --quick    # grid 20, 100 batches, N = 64
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from mc import _median_time  # the same timing rule as the Monte-Carlo table (this script's folder)


def _user_losses():

    def infonce(c_pos, c_neg, *, tau):
        return jax.nn.logsumexp(jnp.concatenate([c_pos[..., None], c_neg], -1) / tau, -1) - c_pos / tau

    def mpt(c_pos, c_neg, *, m):
        return jax.nn.relu(jnp.max(c_neg, -1) - c_pos + m)

    def focal(c_pos, c_neg, *, tau, gamma):
        log_p = c_pos / tau - jax.nn.logsumexp(jnp.concatenate([c_pos[..., None], c_neg], -1) / tau, -1)
        return -((1 - jnp.exp(log_p)) ** gamma) * log_p

    return {
        "infonce": (infonce, {"tau": 0.05}, "logsumexp"),
        "mpt": (mpt, {"m": 0.23}, "max"),
        "focal": (focal, {"tau": 0.05, "gamma": 2.0}, "logsumexp"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    import gradlab
    from gradlab.simulate import Protocol, gd_map

    grid, batches, n = (20, 100, 64) if a.quick else (100, 1000, 128)
    protocol = Protocol(grid=grid, batches=batches, batch_size=n, seed=0)
    print(f"gd_map, grid {grid} x {grid}, {batches} batches, N = {n}, float32, {jax.devices()[0].platform}")
    print(f"{'loss':10s} {'row':22s} {'seconds':>9s}")
    rows = []
    for name, (fn, params, red) in _user_losses().items():
        declared = gradlab.loss_from_cosines(fn, name=f"user_{name}", params=params, neg_reduction=red)
        plain = gradlab.loss_from_cosines(fn, name=f"user_{name}_plain", params=params)
        cands = [("user/factored", declared, "factored"), ("user/direct", plain, "direct")]
        if name in ("infonce", "mpt"):
            cands = [("registered/factored", gradlab.get_loss(name, **params), "factored"),
                     ("registered/direct", gradlab.get_loss(name, **params), "direct"), *cands]
        for row, loss, method in cands:
            t = _median_time(lambda loss=loss, method=method: gd_map(loss, protocol, method=method), a.repeats)
            rows.append((name, row, t))
            print(f"{name:10s} {row:22s} {t:9.4f}", flush=True)
    comp = gradlab.compose(gd="fraction", weight="softmax", ratio="arccon")
    for row, method in (("composed/factored", "factored"), ("composed/direct", "direct")):
        t = _median_time(lambda method=method: gd_map(comp, protocol, method=method), a.repeats)
        print(f"{'fraction-softmax-arccon':10s} {row:22s} {t:9.4f}", flush=True)


if __name__ == "__main__":
    main()
