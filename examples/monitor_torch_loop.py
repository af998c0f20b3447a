# %% [markdown]
# # `ParadigmMonitor` in a PyTorch SimCSE loop
#
# Unsupervised SimCSE (Gao et al. 2021): each sentence is encoded twice, the two dropout
# masks make the two views, and InfoNCE pulls them together against the other sentences
# of the batch. Here the "sentences" are bags of token ids and the encoder is a small
# embedding-bag + MLP with dropout, so the script runs in seconds on a CPU; swap in a
# sentence-transformers model and its dropout-on forward pass and nothing else changes.
#
# The monitor is attached with two lines (marked `# <-- monitor`) and is fed the views
# exactly as the loss sees them: tensors that require grad, on whatever device. gradlab
# never imports torch; it reads the tensors through DLPack (after `detach()`).
#
# Run:  python examples/monitor_torch_loop.py [--steps 60] [--logdir runs/simcse]
#       (needs torch; `--logdir` also needs the `tensorboard` extra)

# %%
from __future__ import annotations

import argparse
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("this example needs PyTorch (pip install torch)")

from gradlab.monitor import ParadigmMonitor

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--logdir", default=None, help="also write TensorBoard events here")
args, _ = parser.parse_known_args()

torch.manual_seed(0)
VOCAB, LENGTH, DIM, TAU = 2000, 12, 128, 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.EmbeddingBag(VOCAB, 256, mode="mean")
        self.mlp = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(256, 256), torch.nn.GELU(),
                                       torch.nn.Dropout(0.1), torch.nn.Linear(256, DIM))

    def forward(self, ids):
        return self.mlp(self.tokens(ids))


def infonce(h, h_prime, tau=TAU):
    """SimCSE's loss: cross-entropy of cos(h_i, h_j') / τ with the positive on the diagonal."""
    logits = F.normalize(h, dim=-1) @ F.normalize(h_prime, dim=-1).T / tau
    return F.cross_entropy(logits, torch.arange(h.shape[0], device=h.device))


# topics: each "sentence" draws most of its tokens from one of 50 topic vocabularies
topics = torch.randint(0, VOCAB, (50, 40))


def batch(n):
    topic = torch.randint(0, 50, (n,))
    ids = topics[topic][:, torch.randint(0, 40, (LENGTH,))]
    noise = torch.randint(0, VOCAB, (n, LENGTH))
    return torch.where(torch.rand(n, LENGTH) < 0.3, noise, ids).to(device)


model = Encoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
sinks = [] if args.logdir is None else [f"tb:{args.logdir}"]
monitor = ParadigmMonitor(losses=("infonce",), taus=(TAU,), sink=sinks, rankme_window=512)  # <-- monitor

model.train()  # dropout on: the two forward passes are the two views
worst = 0.0
for step in range(args.steps + 1):
    ids = batch(args.batch_size)
    h, h_prime = model(ids), model(ids)
    loss = infonce(h, h_prime)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record = monitor.update(step, h, h_prime)  # <-- monitor  (h, h_prime require grad)
    assert h.requires_grad and record["valid"], record["reason"]

    # the same numbers from torch itself, float64: the monitor reads the tensors exactly
    with torch.no_grad():
        a, b = F.normalize(h.double(), dim=-1), F.normalize(h_prime.double(), dim=-1)
        cos = a @ b.T
        pos = torch.diagonal(cos)
        theta_pos = torch.acos(pos.clamp(-1, 1)).mean().item()
        off = ~torch.eye(len(pos), dtype=torch.bool, device=cos.device)
        theta_neg = torch.acos(cos[off].clamp(-1, 1)).mean().item()
        lse_neg = torch.logsumexp(torch.where(off, cos / TAU, -math.inf), dim=1)
        gd = torch.sigmoid(lse_neg - pos / TAU).mean().item()  # Li et al. 2024 Table 1, InfoNCE
    diffs = (abs(record["mu_pos"] - theta_pos), abs(record["mu_neg"] - theta_neg),
             abs(record["gd_mean"]["infonce"] - gd))
    worst = max(worst, *diffs)
    if step % 20 == 0:
        rank = "n/a" if record["rankme"] is None else f"{record['rankme']:.1f}"
        print(f"step {step:3d}  loss {loss.item():.3f}  mu_pos {record['mu_pos']:.3f}  mu_neg {record['mu_neg']:.3f}  "
              f"GD(InfoNCE) {record['gd_mean']['infonce']:.3f}  std {record['embedding_std']:.4f}  RankMe {rank}")
monitor.close()
print(f"largest difference monitor vs torch (mu_pos, mu_neg, InfoNCE GD): {worst:.2e}")
print(f"torch version {torch.__version__} on {device}; gradlab read tensors that require grad")
