# %% [markdown]
# # Watching the paradigm during training: `ParadigmMonitor` in a plain JAX loop
#
# A tiny contrastive run: a linear encoder on synthetic "sentences" (cluster centres plus
# noise), two views per input made with dropout (as SimCSE does), trained with InfoNCE.
# The monitor is attached with two lines (marked `# <-- monitor`). It works the same in a
# PyTorch loop: pass the two views' tensors as they are (gradlab never imports torch).
#
# Run:  python examples/monitor_training_loop.py [--steps 200] [--out monitor_example]
# Then: gradlab report monitor_example/monitor.jsonl --out monitor_example/report

# %%
from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import gradlab
from gradlab.monitor import ParadigmMonitor, report

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--out", type=Path, default=Path("monitor_example"))
parser.add_argument("--no-report", action="store_true")
args, _ = parser.parse_known_args()

# %% [markdown]
# ## Data, encoder, loss

# %%
D_IN, D_OUT, CLUSTERS = 96, 48, 512
rng = np.random.default_rng(0)
# a shared offset puts every embedding in a narrow cone at first (anisotropy, as in
# untrained BERT): the monitor should see μ_neg grow and m_o fall as InfoNCE spreads them.
centres = (rng.normal(size=(CLUSTERS, D_IN)) + 4.0 * rng.normal(size=(1, D_IN))).astype(np.float32)


def sample_batch(key, n):
    k1, k2 = jax.random.split(key)
    idx = jax.random.randint(k1, (n,), 0, CLUSTERS)
    return jnp.asarray(centres)[idx] + 0.8 * jax.random.normal(k2, (n, D_IN))


def encode(w, x, key, rate=0.3):
    keep = jax.random.bernoulli(key, 1 - rate, x.shape)  # dropout: the augmentation
    return (jnp.where(keep, x / (1 - rate), 0.0)) @ w


infonce = gradlab.get_loss("infonce", tau=0.05)


def loss_fn(w, x, key):
    k1, k2 = jax.random.split(key)
    h, h_prime = encode(w, x, k1), encode(w, x, k2)
    return infonce(h, h_prime), (h, h_prime)


@jax.jit
def train_step(w, x, key, lr=0.05):
    (loss, views), grad = jax.value_and_grad(loss_fn, has_aux=True)(w, x, key)
    return w - lr * grad, loss, views


# %% [markdown]
# ## The loop, with the monitor attached

# %%
args.out.mkdir(parents=True, exist_ok=True)
log = args.out / "monitor.jsonl"
log.unlink(missing_ok=True)
monitor = ParadigmMonitor(sink=str(log), every=10, histograms=True)  # <-- monitor

w = jnp.asarray(rng.normal(size=(D_IN, D_OUT)).astype(np.float32) / np.sqrt(D_IN))
key = jax.random.PRNGKey(0)
start = time.perf_counter()
for step in range(args.steps + 1):
    key, kx, ks = jax.random.split(key, 3)
    x = sample_batch(kx, args.batch_size)
    w, loss, (h, h_prime) = train_step(w, x, ks)
    record = monitor.update(step, h, h_prime)  # <-- monitor
    if record is not None and step % 50 == 0:
        print(f"step {step:4d}  loss {float(loss):.3f}  mu_pos {record['mu_pos']:.3f}  mu_neg {record['mu_neg']:.3f}  "
              f"GD off (InfoNCE) {record['gd_off_fraction']['infonce']:.2f}  "
              f"hardest share (tau=0.05) {record['hardest_share']['0.05']:.2f}  m_o {record['m_o']:.3f}")
monitor.close()
print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s; log: {log}")

# %% [markdown]
# ## The curves (same as `gradlab report LOG --out DIR`)

# %%
if not args.no_report:
    meta = report(log, args.out / "report")
    print("\n".join(meta["files"]))
