# %% [markdown]
# # Design a loss: write it, see its GD / W / R, train it
#
# 1. A focal InfoNCE written in five lines as a function of the cosines
#    (`gradlab.loss_from_cosines`): gradlab derives its GD, W and R by autodiff.
# 2. Its GD, W and R maps next to InfoNCE's (InfoNCE written the same way, so that both
#    use the same split: W sums to one, GD = Σ_j ∂L/∂c_j).
# 3. A composition that is not in the papers (`gradlab.compose`): a smooth sigmoid gate,
#    softmax weights and ArcCon's dynamic ratio.
# 4. 100 training steps of each (light encoder, SimCSE dropout views) and STS-B test.
#
# Run:  python examples/design_a_loss.py [--steps 100] [--no-train]
# Runtime: about 1 minute for the maps; training about 1–3 minutes per loss on 2 CPU cores.

# %%
from __future__ import annotations

import argparse
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

import gradlab
from gradlab import simulate

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--no-train", action="store_true")
args, _ = parser.parse_known_args()


# %% [markdown]
# ## 1. A focal InfoNCE in five lines
#
# L_i = −(1 − p_i)^γ log p_i with p_i the softmax probability of the positive.

# %%
def focal(c_pos, c_neg, *, tau, gamma):
    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
    log_p = c_pos / tau - jax.nn.logsumexp(logits, axis=-1)
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p


FOCAL = gradlab.loss_from_cosines(focal, name="focal", params={"tau": 0.05, "gamma": 2.0},
                                  rules={"tau": "positive", "gamma": "nonnegative"}, neg_reduction="logsumexp")
# γ = 0 is InfoNCE: the twin with the same (autodiff) convention
INFONCE = gradlab.loss_from_cosines(focal, name="infonce_autodiff", params={"tau": 0.05, "gamma": 0.0},
                                    neg_reduction="logsumexp")
# a composition that is not in the papers: smooth gate, softmax weight, ArcCon's ratio
SMOOTH = gradlab.compose(gd="sigmoid", weight="softmax", ratio="arccon", m=0.3, width=0.05, tau=0.05)

# %% [markdown]
# ## 2. Their GD, W and R maps
#
# GD map (Li et al. 2024 Fig. 2), the hardest negative's share of W (Fig. 3's quantity per
# cell) and the effective ratio (Fig. 4), on a small protocol.

# %%
protocol = simulate.Protocol(grid=10, batches=64, batch_size=64, seed=0)
CELLS = [(math.pi / 6, math.pi / 3), (math.pi / 6, math.pi / 2), (math.pi / 3, math.pi / 2), (math.pi / 2, 2.0)]


def at(result, mu_pos, mu_neg):
    i = int(np.argmin(np.abs(protocol.mu_pos - mu_pos)))
    j = int(np.argmin(np.abs(protocol.mu_neg - mu_neg)))
    return float(np.asarray(result.mean)[i, j])


t0 = time.perf_counter()
maps = {}
for loss in (INFONCE, FOCAL, SMOOTH):
    maps[loss.name] = (simulate.gd_map(loss, protocol), simulate.weight_map(loss, protocol),
                       simulate.ratio_map(loss, protocol))
print(f"maps of 3 losses in {time.perf_counter() - t0:.1f} s "
      f"(grid {protocol.grid}, {protocol.batches} batches of N = {protocol.batch_size})")
print(f"{'loss':18s} {'(μ_pos, μ_neg)':>16s} {'GD':>9s} {'W share':>8s} {'R eff':>7s}")
for name, (gd, w, r) in maps.items():
    for mp, mn in CELLS:
        print(f"{name:18s} ({mp:5.2f}, {mn:5.2f})   {at(gd, mp, mn):9.3f} {at(w, mp, mn):8.3f} {at(r, mp, mn):7.3f}")
gd_i, gd_f = np.asarray(maps["infonce_autodiff"][0].mean), np.asarray(maps["focal"][0].mean)
seen = (protocol.mu_pos[:, None] < protocol.mu_neg[None, :]) & (gd_i > 1e-6)  # cells that occur in training
ratio = gd_f[seen] / gd_i[seen]
print(f"focal GD / InfoNCE GD over {seen.sum()} cells (μ_pos < μ_neg, GD > 1e-6): "
      f"median {np.median(ratio):.3f}, min {np.min(ratio):.3f}, max {np.max(ratio):.3f}")
print("W share: identical for the three losses (their W is the softmax of c_j/τ); focal reshapes GD only")

# %% [markdown]
# ## 3. Train each for a few steps and compare STS-B

# %%
if not args.no_train:
    from gradlab.real import TrainConfig
    from gradlab.real.trainer import train

    print(f"training {args.steps} steps each (light encoder, batch 64)")
    for loss in (gradlab.get_loss("infonce", tau=0.05), FOCAL, SMOOTH):
        t0 = time.perf_counter()
        cfg = TrainConfig(loss=loss, encoder="light", steps=args.steps, batch_size=64, eval_every=0,
                          max_sentences=20_000, monitor=False, seed=0)
        res = train(cfg)
        print(f"{loss.name:18s} STS-B test Spearman {res.test_before:6.2f} -> {res.test_after:6.2f} "
              f"(best dev {res.best_dev:6.2f}, {time.perf_counter() - t0:.0f} s)")
