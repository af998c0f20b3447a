"""The training data of a run: the corpus read and tokenized (:func:`training_data`), the batch
order (:func:`batch_order`), and the batch of every step in one shape per run (:class:`Batches`,
packed for transformer encoders; :class:`StreamBatches` for a corpus read as training goes)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradlab.real import CORPORA
from gradlab.real.config import TrainConfig
from gradlab.real.flops import transformer_step_flops

__all__ = ["training_data", "batch_order", "Batches", "StreamBatches"]


def training_data(config: TrainConfig, encoder, sentences, token_ids) -> tuple[list[str], Sequence]:
    """The training sentences (the corpus, sampled) and their token ids (none when streaming)."""
    from gradlab.real.data import load_news_sentences, sample_sentences

    if config.stream:
        if sentences is not None or token_ids is not None:
            raise ValueError("stream reads config.corpus itself: pass no sentences / token_ids")
        return [], None

    if sentences is None and config.recipe is not None:
        from gradlab.real.data import read_lines

        sentences = read_lines(config.corpus)
    if sentences is None:
        named = config.corpus in CORPORA
        sentences = load_news_sentences(config.corpus) if named else load_news_sentences(path=config.corpus)
    if config.max_sentences is not None:
        sentences = sample_sentences(sentences, config.max_sentences, seed=config.seed)
    sentences = list(sentences)
    if len(sentences) < config.batch_size:
        raise ValueError(f"{len(sentences)} training sentences is fewer than batch_size={config.batch_size}")
    if token_ids is None:
        token_ids = encoder.token_ids(sentences)
    elif len(token_ids) != len(sentences):
        raise ValueError(f"token_ids has {len(token_ids)} entries for {len(sentences)} sentences")
    return sentences, token_ids


def batch_order(n: int, steps: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """(steps, batch_size) sentence indices: reshuffled epochs, no repeats within a batch."""
    need = steps * batch_size
    chunks, total = [], 0
    while total < need:
        perm = rng.permutation(n)
        usable = (n // batch_size) * batch_size
        chunks.append(perm[:usable])
        total += usable
    return np.concatenate(chunks)[:need].reshape(steps, batch_size)


class Batches:
    """The batch of every step as NumPy arrays of one shape per run (so the step compiles once).

    A packing encoder (one with ``forward_packed``: MiniLM, every loaded checkpoint) gets
    :class:`Packed` batches: rows R = the most any step's first-fit packing needs, rounded up
    to a multiple of the device count, of width C = the length bucket b of the longest
    planned sentence, or 2b where the step's FLOPs
    (:func:`gradlab.real.flops.transformer_step_flops`) are fewer: rows twice as wide hold the
    short sentences that fill a narrow row's end, so fewer tokens are padding, while
    attention's share of a layer's FLOPs, C / (2H + I), stays small (1.4 % for BERT-base at
    C = 64; an encoder without a transformer ``config`` keeps b). ``benchmarks/real.py``'s batches of 32 news sentences under SimCSE's recipe (at
    most 32 tokens) pack into 14 rows of 64 tokens instead of 30 of 32: 7 % fewer tokens,
    3–5 % off the float32 BERT-base step on a CPU (benchmarks/README.md). The width is
    chosen before the rows are rounded, so every device count packs the same rows. Other
    encoders get (ids, mask) padded to the corpus-wide bucket (``fixed``) or the batch's own.
    """

    def __init__(self, encoder, token_ids, order: np.ndarray, *, fixed: bool, n_devices: int):
        from gradlab.real.packing import length_bucket

        self.encoder, self.token_ids, self.order = encoder, token_ids, order
        max_len = encoder.max_seq_length
        self.packed = hasattr(encoder, "forward_packed")
        if self.packed:
            lengths = [[len(token_ids[i]) for i in batch] for batch in order]
            narrow = length_bucket(max(max(batch) for batch in lengths), max_len)
            # a PackedEncoder need not be a transformer: without its shapes, no FLOPs to compare
            config = getattr(getattr(encoder, "train_view", encoder), "config", None)
            if config is None:
                rows, self.width = _rows_needed(lengths, narrow), narrow
            else:
                shapes = [(_rows_needed(lengths, width), width) for width in (narrow, 2 * narrow)]
                rows, self.width = min(shapes, key=lambda shape: transformer_step_flops(
                    config, *shape, self.batch_size, pooler=False, packed=True))
            self.rows = -(-rows // n_devices) * n_devices
        else:
            longest = max(max(1, len(t)) for t in token_ids)
            self.length = length_bucket(longest, max_len) if fixed else None

    @property
    def batch_size(self) -> int:
        return self.order.shape[1]

    def __call__(self, step: int) -> Any:
        return _assemble(self, [self.token_ids[i] for i in self.order[step - 1]])


def _rows_needed(lengths: list[list[int]], width: int) -> int:
    """The most rows of ``width`` tokens that first-fit packing needs for any batch of sentence ``lengths``."""
    from gradlab.real.packing import first_fit

    rows = 1
    for batch in lengths:
        (placed,) = first_fit(batch, width=width, rows=len(batch), slots=len(batch))
        rows = max(rows, int(placed[:, 1].max()) + 1)
    return rows


def _assemble(batches, lists: list) -> Any:
    """One batch of token-id lists: packed (rows, width) or padded (ids, mask) to ``batches.length``."""
    if batches.packed:
        return batches.encoder.pack(lists, rows=batches.rows, width=batches.width)
    from gradlab.real.packing import length_bucket

    L = batches.length or length_bucket(max(max(1, len(t)) for t in lists), batches.encoder.max_seq_length)
    ids = np.zeros((len(lists), L), dtype=np.int32)
    mask = np.zeros((len(lists), L), dtype=np.int32)
    for r, t in enumerate(lists):
        t = t[:L]
        ids[r, : len(t)] = t
        mask[r, : max(1, len(t))] = 1
    return ids, mask


class StreamBatches:
    """The batches of a one-sentence-per-line file read as training goes (``TrainConfig.stream``).

    Lines come from :func:`gradlab.real.data.stream_lines` and are tokenized per batch; every
    batch has ``batch_size`` rows of the encoder's full length (its length bucket), so any
    sentence fits and the step compiles once. Steps are served in order; asking for a later
    step skips the batches before it without tokenizing them (a resumed run replays the stream).
    """

    order = None

    def __init__(self, encoder, path, *, seed: int, buffer: int | None, batch_size: int, n_devices: int):
        from gradlab.real.data import SHUFFLE_BUFFER, stream_lines
        from gradlab.real.packing import length_bucket

        self.encoder, self.batch_size, self.next_step = encoder, batch_size, 1
        self.lines = stream_lines(path, seed=seed, buffer=buffer or SHUFFLE_BUFFER)
        self.packed = hasattr(encoder, "forward_packed")
        self.width = self.length = length_bucket(encoder.max_seq_length, encoder.max_seq_length)
        self.rows = -(-batch_size // n_devices) * n_devices

    def __call__(self, step: int) -> Any:
        if step < self.next_step:
            raise ValueError(f"a streamed corpus goes forward only: step {step} after {self.next_step - 1}")
        for _ in range(step - self.next_step):  # skipped steps: read, not tokenized
            next(itertools.islice(self.lines, self.batch_size - 1, None), None)
        self.next_step = step + 1
        return _assemble(self, self.encoder.token_ids(list(itertools.islice(self.lines, self.batch_size))))
