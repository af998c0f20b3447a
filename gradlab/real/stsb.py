"""STS Benchmark evaluation: Spearman × 100 of cosine similarity against the gold scores.

The protocol of SentEval / MTEB's STSBenchmark: embed both sentences of every pair,
take their cosine similarity, and rank-correlate it with the gold 0–5 scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from gradlab.real.data import STSPairs, load_stsb

__all__ = ["stsb_spearman", "stsb_scores", "stsb_scorer", "pair_cosines", "spearman_x100", "encode_unique"]

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


def spearman_x100(pred: np.ndarray, gold: np.ndarray) -> float:
    """Spearman's rank correlation × 100 (ties get average ranks); NaN if either side is constant.

    Examples:
      >>> spearman_x100([0.1, 0.4, 0.3], [1.0, 5.0, 2.0])
      100.0
    """
    pred = np.asarray(pred, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    if pred.ndim != 1 or pred.shape != gold.shape:
        raise ValueError(f"expected two 1-D arrays of the same length, got {pred.shape} and {gold.shape}")
    if len(pred) < 2 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return float("nan")
    return float(100.0 * stats.spearmanr(pred, gold).statistic)


def encode_unique(
    encode_fn: EncodeFn,
    sentences: Sequence[str],
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Embeddings (len(sentences), D) of ``sentences``, each distinct sentence encoded once.

    Args:
      encode_fn: list of N sentences -> (N, D) embeddings.
      sentences: may repeat (STS files do); rows come back in this order.
      batch_size: None: one ``encode_fn`` call in first-seen order; else calls of at most this
        many sentences, shortest first (less padding; each embedding must not depend on its batch).
      progress: called as ``progress(done, total)`` with distinct sentences encoded so far.
    """
    uniq = list(dict.fromkeys(sentences))
    if batch_size is None:
        chunks = [uniq]
    else:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        uniq.sort(key=len)
        chunks = [uniq[i : i + batch_size] for i in range(0, len(uniq), batch_size)]
    parts, done = [], 0
    if progress is not None:
        progress(0, len(uniq))
    for chunk in chunks:
        emb = np.asarray(encode_fn(chunk))
        if emb.ndim != 2 or emb.shape[0] != len(chunk):
            raise ValueError(f"encode_fn returned shape {emb.shape} for {len(chunk)} sentences; expected (N, D)")
        parts.append(emb)
        done += len(chunk)
        if progress is not None:
            progress(done, len(uniq))
    emb = np.concatenate(parts) if parts else np.zeros((0, 0))
    return emb[_rows_of(sentences, uniq)]


def _rows_of(sentences: Sequence[str], uniq: Sequence[str]) -> np.ndarray:
    """The row of each of ``sentences`` in ``uniq`` (which holds each of them once)."""
    pos = {s: i for i, s in enumerate(uniq)}
    return np.fromiter((pos[s] for s in sentences), dtype=np.int64, count=len(sentences))


def _encode_pairs(encode_fn: EncodeFn, pairs: STSPairs) -> tuple[np.ndarray, np.ndarray]:
    # Encode every distinct sentence once (STS-B repeats some).
    emb = encode_unique(encode_fn, pairs.sentence1 + pairs.sentence2)
    return emb[: len(pairs)], emb[len(pairs) :]


def stsb_scorer(prepare: Callable[[Sequence[str]], Callable[[Any], np.ndarray]],
                pairs: STSPairs) -> Callable[[Any], float]:
    """Spearman × 100 on ``pairs`` as a function of a model's parameters, for scoring during training.

    ``prepare(sentences)`` (e.g. ``encoder.embedder``: tokenizing and packing done once) runs once
    on the distinct sentences and returns ``params -> (N, D)`` embeddings; each call of the
    scorer only embeds and ranks. It gives :func:`stsb_spearman` of the same model.
    """
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 pairs, got {len(pairs)}")
    both = pairs.sentence1 + pairs.sentence2
    uniq = list(dict.fromkeys(both))
    rows, n = _rows_of(both, uniq), len(pairs)
    gold = np.asarray(pairs.score, dtype=np.float64)
    embed = prepare(uniq)

    def score(params: Any) -> float:
        emb = np.asarray(embed(params))[rows]
        return spearman_x100(pair_cosines(emb[:n], emb[n:]), gold)

    return score


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
    r = stats.pearsonr(cos, pairs.score).statistic
    out = {"spearman": spearman_x100(cos, pairs.score), "pearson": float(100.0 * r), "n_pairs": len(pairs)}
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
