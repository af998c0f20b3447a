"""STS Benchmark evaluation: Spearman × 100 of cosine similarity against the gold scores.

The protocol of SentEval / MTEB's STSBenchmark: embed both sentences of every pair,
take their cosine similarity, and rank-correlate it with the gold 0–5 scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from gradlab.real.data import STSPairs, load_stsb

__all__ = ["stsb_spearman", "stsb_scores", "pair_cosines"]

EncodeFn = Callable[[Sequence[str]], np.ndarray]


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, D) arrays, float64 (zero rows give 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"expected two (N, D) arrays of the same shape, got {a.shape} and {b.shape}")
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    den = na * nb
    return np.where(den > 0, np.sum(a * b, axis=1) / np.where(den > 0, den, 1.0), 0.0)


def _encode_pairs(encode_fn: EncodeFn, pairs: STSPairs) -> tuple[np.ndarray, np.ndarray]:
    # Encode every distinct sentence once (STS-B repeats some).
    uniq = list(dict.fromkeys(pairs.sentence1 + pairs.sentence2))
    emb = np.asarray(encode_fn(uniq))
    if emb.ndim != 2 or emb.shape[0] != len(uniq):
        raise ValueError(f"encode_fn returned shape {emb.shape} for {len(uniq)} sentences; expected (N, D)")
    pos = {s: i for i, s in enumerate(uniq)}
    i1 = np.fromiter((pos[s] for s in pairs.sentence1), dtype=np.int64, count=len(pairs))
    i2 = np.fromiter((pos[s] for s in pairs.sentence2), dtype=np.int64, count=len(pairs))
    return emb[i1], emb[i2]


def stsb_scores(
    encode_fn: EncodeFn,
    split: str = "test",
    *,
    path: str | Path | None = None,
    pairs: STSPairs | None = None,
    details: bool = False,
) -> dict:
    """Spearman and Pearson (× 100) of cosine similarity against gold on an STS-B split.

    Args:
      encode_fn: list of N sentences -> (N, D) embeddings.
      split: ``"train"``, ``"dev"`` or ``"test"``.
      path: official STS-B file or directory (default: the shipped copy).
      pairs: evaluate these pairs instead of loading a split (e.g. a subset).
      details: also return the per-pair ``"cosine"`` and ``"gold"`` arrays, (n_pairs,).

    Returns:
      ``{"spearman", "pearson", "n_pairs"}`` (+ ``"cosine"``, ``"gold"`` with ``details``).
    """
    if pairs is None:
        pairs = load_stsb(split, path)
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 pairs, got {len(pairs)}")
    a, b = _encode_pairs(encode_fn, pairs)
    cos = pair_cosines(a, b)
    rho = stats.spearmanr(cos, pairs.score).statistic
    r = stats.pearsonr(cos, pairs.score).statistic
    out = {"spearman": float(100.0 * rho), "pearson": float(100.0 * r), "n_pairs": len(pairs)}
    if details:
        out["cosine"] = cos
        out["gold"] = np.asarray(pairs.score, dtype=np.float64)
    return out


def stsb_spearman(
    encode_fn: EncodeFn,
    split: str = "test",
    *,
    path: str | Path | None = None,
    pairs: STSPairs | None = None,
) -> float:
    """Spearman × 100 of cosine similarity against gold on an STS-B split (SentEval / MTEB protocol).

    Examples:
      >>> from gradlab.real import load_minilm, stsb_spearman
      >>> model = load_minilm()
      >>> round(stsb_spearman(model.encode, "test"), 1)  # doctest: +SKIP
      82.0
    """
    return stsb_scores(encode_fn, split, path=path, pairs=pairs)["spearman"]
