# %% [markdown]
# # `ParadigmMonitor` in an optax loop, logging to TensorBoard or a tracker
#
# A two-layer encoder trained with InfoNCE and `optax.adam` on synthetic clustered
# inputs; the two views come from two dropout masks (as in SimCSE). The monitor is
# attached with two lines (marked `# <-- monitor`); its records go to
#
# * TensorBoard, with `--logdir DIR` (`sink="tb:DIR"`; needs the `tensorboard` extra),
# * any experiment tracker through `LogSink(log)`: here a stand-in `log(metrics, step=...)`
#   that keeps the curves in a dict; `LogSink(wandb.log)`, `LogSink(mlflow.log_metrics)`
#   and `LogSink(trackio.log)` are the same call.
#
# With several devices, shard the global batch over them (`--shard`): the monitor
# measures it in row blocks, never forming the N × N cosine matrix, with the numbers of
# the unsharded batch.
#
# Run:  python examples/monitor_optax_loop.py [--steps 200] [--logdir runs/optax] [--shard]

# %%
from __future__ import annotations

import argparse
from collections import defaultdict

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradlab
from gradlab.monitor import LogSink, ParadigmMonitor

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--logdir", default=None)
parser.add_argument("--shard", action="store_true", help="shard the batch over all devices")
args, _ = parser.parse_known_args()

D_IN, HIDDEN, D_OUT, CLUSTERS = 64, 128, 32, 256
rng = np.random.default_rng(0)
centres = jnp.asarray(rng.normal(size=(CLUSTERS, D_IN)) + 3.0 * rng.normal(size=(1, D_IN)), jnp.float32)


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (D_IN, HIDDEN)) / np.sqrt(D_IN),
            "w2": jax.random.normal(k2, (HIDDEN, D_OUT)) / np.sqrt(HIDDEN)}


def encode(params, x, key, rate=0.2):
    keep = jax.random.bernoulli(key, 1 - rate, x.shape)
    return jax.nn.gelu(jnp.where(keep, x / (1 - rate), 0.0) @ params["w1"]) @ params["w2"]


infonce = gradlab.get_loss("infonce", tau=0.05)
opt = optax.adam(1e-3)


def loss_fn(params, x, key):
    k1, k2 = jax.random.split(key)
    h, h_prime = encode(params, x, k1), encode(params, x, k2)
    return infonce(h, h_prime), (h, h_prime)


@jax.jit
def train_step(params, state, x, key):
    (loss, views), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, key)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss, views


curves = defaultdict(list)


def log(metrics, step=None):  # stands in for wandb.log / mlflow.log_metrics / trackio.log
    for name, value in metrics.items():
        curves[name].append((step, value))


sinks = [LogSink(log, prefix="paradigm/")] + ([f"tb:{args.logdir}"] if args.logdir else [])
monitor = ParadigmMonitor(sink=sinks, every=10, rankme_window=1024)  # <-- monitor

sharding = None
if args.shard:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))

key = jax.random.PRNGKey(0)
params = init(key)
state = opt.init(params)
for step in range(args.steps + 1):
    key, kx, kn, ks = jax.random.split(key, 4)
    x = centres[jax.random.randint(kx, (args.batch_size,), 0, CLUSTERS)]
    x = x + 0.7 * jax.random.normal(kn, x.shape)
    if sharding is not None:
        x = jax.device_put(x, sharding)
    params, state, loss, (h, h_prime) = train_step(params, state, x, ks)
    record = monitor.update(step, h, h_prime)  # <-- monitor
    if record is not None and step % 50 == 0:
        print(f"step {step:4d}  loss {float(loss):.3f}  mu_pos {record['mu_pos']:.3f}  mu_neg {record['mu_neg']:.3f}  "
              f"GD(InfoNCE) {record['gd_mean']['infonce']:.3f}  std {record['embedding_std']:.4f}")
monitor.close()

rank = curves["paradigm/rankme"]
print(f"tracker curves: {len(curves)} names, e.g. paradigm/gd_mean/infonce at steps "
      f"{[s for s, _ in curves['paradigm/gd_mean/infonce']][:4]}...")
print(f"RankMe per window of 1024 rows (of {D_OUT} dimensions): " + ", ".join(f"{v:.1f}" for _, v in rank))
print(f"devices: {len(jax.devices())}, batch sharded: {args.shard}")
