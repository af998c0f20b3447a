"""State 0 of the ``simcse`` study under two poolings: the scores, and what each loss's gradient sees.

Before any update, all-MiniLM-L6-v2 is measured under SimCSE's recipe (Gao et al. 2021) with

- ``cls``: the recipe's own pooling (an MLP over [CLS] in training, [CLS] before it in evaluation), and
- ``avg``: the model's own mean pooling in training and evaluation (SimCSE's ``--pooler_type avg``),

giving STS-B dev and test Spearman × 100 (the evaluation pooling) and, on two dropout views of
training sentences in batches of the recipe's N = 64, the monitor's statistics of each of the
study's losses: its mean Gradient Dissipation ``gd_mean`` and the share of anchors whose GD is
off, and the share of anchors whose Eq. 5 gate d_i = 1[h_i·h_i' − max_k h_i·h_k' < m] (m = 0.3,
the gate every modified loss of Li et al. 2024 Sec. 4 carries) is open.

    python examples/experiments/simcse_state0.py            # writes results/simcse_state0.{json,md}

About two minutes on two CPU cores. Every number is the mean over the batches.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

import gradlab
from gradlab.design import resolve_loss
from gradlab.experiments import SIMCSE_LOSSES, loss_label, portable_command
from gradlab.io import atomic_write_text, save_json_atomic
from gradlab.monitor import analyze
from gradlab.real import load_stsb, simcse_unsup_encoder, stsb_spearman
from gradlab.real.data import load_news_sentences, sample_sentences
from gradlab.real.packing import pad_ids
from gradlab.real.step import views_fn

HERE = Path(__file__).resolve().parent
POOLINGS = ("cls", "avg")
MARGIN = 0.3  # Li et al. 2024 Eq. 5 and Sec. 4: the modified losses' gate
BATCH = 64  # the recipe's N (Gao et al. 2021, Table A.1, BERT-base)


def training_views(encoder, sentences: list[str], *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two dropout views of ``sentences`` through the recipe's training view, in batches of ``BATCH``."""
    import jax

    views = jax.jit(views_fn(encoder.train_view, packed=False))
    ids_all = encoder.token_ids(sentences)
    hs, hps = [], []
    for b in range(len(sentences) // BATCH):
        ids, mask = pad_ids(ids_all[b * BATCH:(b + 1) * BATCH], encoder.max_seq_length)
        h, hp = views(encoder.params, encoder.frozen, (ids, mask), jax.random.fold_in(jax.random.key(seed), b))
        hs.append(np.asarray(h))
        hps.append(np.asarray(hp))
    return np.concatenate(hs), np.concatenate(hps)


def measure(pooling: str, sentences: list[str], *, seed: int) -> dict:
    """STS-B dev / test and the monitor's statistics of every study loss at state 0, under ``pooling``."""
    enc = simcse_unsup_encoder("minilm", seed=seed, pooling=pooling)
    out = {"stsb_dev": stsb_spearman(enc.encode, pairs=load_stsb("dev")),
           "stsb_test": stsb_spearman(enc.encode, pairs=load_stsb("test")), "losses": {}}
    h, hp = training_views(enc, sentences, seed=seed)
    for name in SIMCSE_LOSSES:
        r = analyze(h, hp, batch_size=BATCH, losses=(), ratio_losses=(), margin=MARGIN, trained=resolve_loss(name))
        out["losses"][name] = {"gd_mean": float(np.mean(r["gd_mean"]["trained"])),
                               "gd_off_fraction": float(np.mean(r["gd_off_fraction"]["trained"]))}
        out.update(mu_pos=float(np.mean(r["mu_pos"])), mu_neg=float(np.mean(r["mu_neg"])),
                   gate_open_fraction=float(1.0 - np.mean(r["gd_off_fraction"]["baseline"])),
                   n_anchors=int(r["n_batches"]) * BATCH)
    return out


def flat_numbers(poolings: dict) -> dict:
    """The write-up's keys: ``<pooling>.<statistic>`` and ``<pooling>.<loss>.gd_mean`` / ``.gd_off_fraction``."""
    out = {}
    for pooling, r in poolings.items():
        for key, value in r.items():
            if key == "losses":
                out.update({f"{pooling}.{name}.{k}": v for name, d in value.items() for k, v in d.items()})
            else:
                out[f"{pooling}.{key}"] = value
    return out


def markdown(result: dict) -> str:
    rows = ["| pooling | STS-B dev | STS-B test | μ_pos | μ_neg | gate d_i open (m = 0.3) | "
            + " | ".join(f"{loss_label(n)} GD" for n in SIMCSE_LOSSES) + " |",
            "|---" * (6 + len(SIMCSE_LOSSES)) + "|"]
    for pooling, r in result["poolings"].items():
        rows.append(f"| {pooling} | {r['stsb_dev']:.2f} | {r['stsb_test']:.2f} | {r['mu_pos']:.3f} | {r['mu_neg']:.3f} | "
                    f"{100 * r['gate_open_fraction']:.1f} % | "
                    + " | ".join(f"{r['losses'][n]['gd_mean']:.3g}" for n in SIMCSE_LOSSES) + " |")
    return "\n".join([
        "# The simcse study's state 0 under two poolings", "",
        "all-MiniLM-L6-v2 before any update, under SimCSE's recipe (Gao et al. 2021) with the recipe's "
        "pooling (`cls`: an MLP over [CLS] in training, [CLS] before it in evaluation) and with the model's "
        "own mean pooling in both (`avg`, SimCSE's `--pooler_type avg`). STS-B Spearman × 100 with the "
        "evaluation pooling; the rest on two dropout views of "
        f"{result['n_sentences']} training sentences in batches of {BATCH}: the angles μ_pos, μ_neg (radians), "
        "the share of anchors whose gate d_i = 1[h_i·h_i' − max_k h_i·h_k' < 0.3] is open (Li et al. 2024 "
        "Eq. 5; every modified loss carries it), and each loss's mean Gradient Dissipation.", "",
        *rows, "", f"Command: `{result['command']}`", ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=1024, help="training sentences measured (default 1024)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    if args.sentences < BATCH:
        ap.error(f"--sentences must be at least {BATCH}")
    sentences = sample_sentences(load_news_sentences("NewsArticles"), args.sentences, seed=args.seed)
    poolings = {p: measure(p, sentences, seed=args.seed) for p in POOLINGS}
    result = {"study": "simcse_state0", "command": portable_command(" ".join(["python", *sys.argv])),
              "gradlab": gradlab.__version__, "machine": platform.machine(), "n_sentences": len(sentences),
              "batch_size": BATCH, "margin": MARGIN, "poolings": poolings, "numbers": flat_numbers(poolings),
              "claims": []}  # measurements, no claims: the write-up quotes them (results/<name>.json layout)
    save_json_atomic(args.out / "simcse_state0.json", result)
    atomic_write_text(args.out / "simcse_state0.md", markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
