"""Sentences to fixed-shape batches: sequence packing (:class:`Packed`, :func:`first_fit`,
:func:`pack`), the packed calls that embed many sentences, and padding to length buckets.

Every batch of a run has one shape, so a jitted forward compiles once; packing puts whole
sentences end to end in rows of one width, so no compute goes to padding beyond the rows'
ends (each sentence attends only to itself: :func:`gradlab.real.bert.bert_forward_packed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["Packed", "first_fit", "pack", "packed_calls", "run_packed_calls", "encode_packed", "length_bucket",
           "pad_ids"]


class Packed(NamedTuple):
    """Sentences packed end to end into rows of a fixed width (sequence packing).

    A row holds several whole sentences; attention is block-diagonal (a token sees only
    its own sentence), positions restart at 0 in every sentence, so each sentence's
    embedding is the one it gets alone, without the padding a (batch, longest) layout
    pays for. The shapes are fixed by (rows, width, slots), not by the sentences.

    Attributes:
      input_ids: (R, C) int32 token ids, 0 after the last sentence of a row.
      position_ids: (R, C) int32 position of each token inside its sentence.
      segment_ids: (R, C) int32 ``k + 1`` on the tokens of sentence k, 0 on padding.
      lengths: (S,) int32 tokens of sentence k (0 for an unused slot).
    """

    input_ids: Any
    position_ids: Any
    segment_ids: Any
    lengths: Any


def first_fit(lengths: Sequence[int], *, width: int, rows: int, slots: int) -> list[np.ndarray]:
    """First-fit decreasing: sentences into rows of ``width`` tokens, rows into calls of ``rows``.

    Sentences are taken longest first; each goes into the first open row with room whose
    call holds fewer than ``slots`` sentences, else into a new row. Short sentences thus fill
    the ends of rows opened by long ones (at most 11/9 of the fewest rows possible, plus one).

    Args:
      lengths: tokens per sentence, each in [1, width].
      width: tokens per row (C).
      rows: rows per call (R).
      slots: sentences per call at most (S).

    Returns:
      One (n_k, 3) int array per call: sentence index, row in the call, offset in the row.
      Every sentence appears in exactly one call.

    Examples:
      >>> [c.tolist() for c in first_fit([5, 3, 4], width=8, rows=1, slots=4)]
      [[[0, 0, 0], [1, 0, 5]], [[2, 0, 0]]]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > width):
        raise ValueError(f"sentence lengths must be in [1, width={width}]; got {lengths.min()}..{lengths.max()}")
    most_rows = lengths.size + rows * (lengths.size // max(slots, 1) + 1)  # incl. rows a full call skips
    free = np.zeros(most_rows, dtype=np.int64)  # room left in each opened row
    in_call = np.zeros(most_rows // rows + 1, dtype=np.int64)  # sentences in each call
    opened = 0
    placed = []
    for i in np.argsort(-lengths, kind="stable"):
        n = lengths[i]
        fits = np.flatnonzero((free[:opened] >= n) & (in_call[np.arange(opened) // rows] < slots))
        if fits.size:
            r = int(fits[0])
        else:
            r, opened = opened, opened + 1
            if in_call[r // rows] >= slots:  # a full call: start the next one
                r = opened = -(-opened // rows) * rows
                opened += 1
            free[r] = width
        placed.append((r // rows, int(i), r % rows, int(width - free[r])))
        free[r] -= n
        in_call[r // rows] += 1
    table = np.asarray(placed, dtype=np.int64).reshape(-1, 4)
    return [table[table[:, 0] == c, 1:] for c in np.unique(table[:, 0])]


def pack(token_ids: Sequence[Sequence[int]], placement: np.ndarray, *, width: int, rows: int,
         slots: int) -> tuple[Packed, np.ndarray]:
    """NumPy :class:`Packed` arrays for the sentences of one call of :func:`first_fit`.

    Returns:
      (packed, index): ``index`` (n,) are the sentences in slot order (slot k holds
      ``token_ids[index[k]]``).
    """
    ids = np.zeros((rows, width), dtype=np.int32)
    pos = np.zeros((rows, width), dtype=np.int32)
    seg = np.zeros((rows, width), dtype=np.int32)
    lengths = np.zeros(slots, dtype=np.int32)
    for k, (i, row, off) in enumerate(placement):
        t = token_ids[i]
        n = len(t)
        ids[row, off : off + n] = t
        pos[row, off : off + n] = np.arange(n)
        seg[row, off : off + n] = k + 1
        lengths[k] = n
    return Packed(ids, pos, seg, lengths), placement[:, 0].copy()


_BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def length_bucket(n: int, max_len: int) -> int:
    """Padded length for a batch whose longest sequence has ``n`` tokens (few distinct shapes)."""
    for b in _BUCKETS:
        if n <= b:
            return min(b, max_len)
    return max_len


def pad_ids(ids: Sequence[Sequence[int]], max_len: int, pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token-id lists with 0: (input_ids, attention_mask), both (B, L) int32.

    L is ``pad_to`` or the length bucket of the longest list (at most ``max_len``).
    """
    longest = max((len(x) for x in ids), default=1)
    L = pad_to if pad_to is not None else length_bucket(max(longest, 1), max_len)
    if longest > L:
        raise ValueError(f"pad_to={L} is shorter than the longest tokenized sentence ({longest})")
    out = np.zeros((len(ids), L), dtype=np.int32)
    mask = np.zeros((len(ids), L), dtype=np.int32)
    for i, x in enumerate(ids):
        out[i, : len(x)] = x
        mask[i, : len(x)] = 1
    return out, mask


def packed_calls(token_ids: Sequence[Sequence[int]], *, rows: int, max_len: int) -> list[tuple[Packed, np.ndarray]]:
    """The packed forward calls that embed ``token_ids``: ``(packed, index)`` pairs, every call of
    one shape, its first ``len(index)`` slots holding the sentences ``index`` (device arrays).

    Width C is the length bucket of the longest sentence; each call holds ``rows`` rows
    and at most ``rows * C // 4`` sentences.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"batch_size must be an integer >= 1; got {rows!r}")
    if not token_ids:
        return []
    lengths = [len(t) for t in token_ids]
    width = length_bucket(max(lengths), max_len)
    slots = max(1, rows * width // 4)
    calls = []
    for placement in first_fit(lengths, width=width, rows=rows, slots=slots):
        packed, index = pack(token_ids, placement, width=width, rows=rows, slots=slots)
        calls.append((jax.device_put(packed), index))
    return calls


def run_packed_calls(embed, calls: list[tuple[Packed, np.ndarray]], n: int, dim: int) -> np.ndarray:
    """(n, dim) float32: ``embed(packed) -> (S, dim)`` on each of :func:`packed_calls`, every call
    dispatched before the first result is read."""
    out = np.zeros((n, dim), dtype=np.float32)
    results = [(embed(packed), index) for packed, index in calls]
    for emb, index in results:  # the whole call to the host, then its sentences' slots: a slice on
        # the device would be one more program per call (and one more compilation per length)
        out[index] = np.asarray(emb, dtype=np.float32)[: len(index)]
    return out


def encode_packed(embed, token_ids: Sequence[Sequence[int]], *, rows: int, max_len: int, dim: int) -> np.ndarray:
    """Embed many sentences in packed calls of one shape: ``embed(packed) -> (S, dim)``
    (:func:`packed_calls`, then :func:`run_packed_calls`)."""
    return run_packed_calls(embed, packed_calls(token_ids, rows=rows, max_len=max_len), len(token_ids), dim)
