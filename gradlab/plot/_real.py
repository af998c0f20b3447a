"""Recipes for the real-sentence pipeline (``gradlab stsb``, ``gradlab sts``, ``gradlab train``).

Each takes data (arrays, the training losses and evaluations) and returns a Figure
built with the object API: no pyplot, no backend switch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gradlab.plot._style import new_figure, styled

__all__ = ["stsb_scatter", "train_curves", "sts_scores"]


@styled
def stsb_scatter(cosine, gold, *, title: str | None = None):
    """STS Benchmark: the encoder's cosine similarity against the gold score, one point per pair.

    Args:
      cosine: (P,) cosine similarities of the sentence pairs.
      gold: (P,) gold similarities (0–5).
      title: axes title (e.g. the encoder and its Spearman correlation).

    Returns:
      The matplotlib Figure (one axes).
    """
    fig, axes = new_figure(1, 1, panel=(4.5, 4.0))
    ax = axes[0, 0]
    ax.scatter(np.asarray(gold, float), np.asarray(cosine, float), s=4, alpha=0.4)
    ax.set_xlabel("gold similarity (0–5)")
    ax.set_ylabel("cosine similarity")
    if title:
        ax.set_title(title, fontsize=10)
    return fig


@styled
def train_curves(losses, evals: Sequence[Mapping], *, best_step: int | None = None, title: str | None = None):
    """A training run: the loss per step (left) and the STS-B dev Spearman × 100 per evaluation (right).

    Args:
      losses: (S,) training loss per optimizer step (steps 1..S).
      evals: the evaluations, dicts with ``"step"`` and ``"dev_spearman"``.
      best_step: the step of the kept checkpoint, marked with a dashed line.
      title: figure title.

    Returns:
      The matplotlib Figure (two axes).
    """
    losses = np.asarray(losses, float)
    fig, axes = new_figure(1, 2, panel=(4.5, 3.5))
    a1, a2 = axes[0]
    a1.plot(np.arange(1, losses.size + 1), losses, lw=1)
    a1.set_xlabel("step")
    a1.set_ylabel("training loss")
    a2.plot([e["step"] for e in evals], [e["dev_spearman"] for e in evals], marker="o")
    if best_step is not None:
        a2.axvline(best_step, color="grey", ls="--", lw=1, label=f"best (step {best_step})")
        a2.legend(fontsize=8)
    a2.set_xlabel("step")
    a2.set_ylabel("STS-B dev Spearman x 100")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


@styled
def sts_scores(tasks: Sequence[str], scores: Sequence[float], *, title: str | None = None):
    """The SentEval STS suite: one bar per task (Spearman × 100), the average as a dashed line.

    Args:
      tasks: task names (``STS12``, ..., ``SICKRelatedness``), the ``avg`` row excluded.
      scores: (T,) their Spearman × 100.
      title: axes title (e.g. the encoder).

    Returns:
      The matplotlib Figure (one axes), each bar labelled with its score.
    """
    scores = np.asarray(scores, float)
    fig, axes = new_figure(1, 1, panel=(max(4.5, 0.9 * len(tasks) + 1.5), 3.5))
    ax = axes[0, 0]
    bars = ax.bar(np.arange(len(tasks)), scores, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:.2f}" for v in scores], fontsize=8, padding=2)
    if len(tasks) > 1:
        avg = float(np.mean(scores))
        ax.axhline(avg, color="grey", ls="--", lw=1, label=f"avg {avg:.2f}")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xticks(np.arange(len(tasks)), [str(t) for t in tasks], rotation=30, ha="right")
    ax.set_ylabel("Spearman x 100")
    ax.set_ylim(min(0.0, float(np.nanmin(scores, initial=0.0)) * 1.1), 100.0)  # bars from zero
    if title:
        ax.set_title(title, fontsize=10)
    return fig
