"""The training data of a run: the corpus read and tokenized (:func:`training_data`), the batch
order (:func:`batch_order`), and the batch of every step in as few shapes as pay for their
compilation (:class:`Batches`, packed for transformer encoders; :class:`StreamBatches` for a corpus
read as training goes, one shape)."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradlab.real import CORPORA
from gradlab.real.config import TrainConfig
from gradlab.real.flops import transformer_step_flops

__all__ = ["training_data", "batch_order", "Batches", "StreamBatches", "row_counts", "COMPILE_FLOPS"]


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
    """The batch of every step as NumPy arrays, in as few shapes as pay for their compilation.

    A packing encoder (one with ``forward_packed``: MiniLM, every loaded checkpoint) gets
    :class:`Packed` batches. Their width C is the length bucket b of the longest planned
    sentence, or 2b where the run's FLOPs (:func:`gradlab.real.flops.transformer_step_flops`)
    are fewer: rows twice as wide hold the short sentences that fill a narrow row's end, while
    attention's share of a layer's FLOPs, C / (2H + I), stays small (1.4 % for BERT-base at
    C = 64; an encoder without a transformer ``config`` keeps b). ``benchmarks/real.py``'s
    batches of 32 news sentences under SimCSE's recipe (at most 32 tokens) pack into 14 rows of
    64 tokens instead of 30 of 32: 7 % fewer tokens, 3–5 % off the float32 BERT-base step on a
    CPU (benchmarks/README.md).

    Each step's batch takes the fewest rows of the run's :attr:`row_counts` that hold it. Each
    count compiles the step once, so a run has the most rows any step's first-fit packing
    needs, and a smaller count only where the FLOPs it saves over the run exceed
    ``compile_flops`` (:func:`row_counts`): on a CPU, 1,000 steps of 32 news sentences for
    BERT-base pack into 12 to 15 rows (9 % fewer FLOPs than 15 every step), while a run of a
    few steps, or on a GPU, keeps one count. The rows a batch does not need are empty and
    change no number beyond rounding. Width and counts are chosen before the rows are rounded
    up to a multiple of the device count, so every device count packs the same rows.

    Other encoders get (ids, mask) padded to the corpus-wide bucket (``fixed``) or the batch's own.

    Args:
      compile_flops: what one compilation of the step costs, in FLOPs at the step's rate (None:
        :data:`COMPILE_FLOPS` of ``gradlab.backend.current()``; 0 gives every row count a step needs).
    """

    def __init__(self, encoder, token_ids, order: np.ndarray, *, fixed: bool, n_devices: int,
                 compile_flops: float | None = None):
        from gradlab.real.packing import length_bucket

        self.encoder, self.token_ids, self.order = encoder, token_ids, order
        max_len = encoder.max_seq_length
        self.packed = hasattr(encoder, "forward_packed")
        if self.packed:
            if compile_flops is None:
                from gradlab import backend

                compile_flops = COMPILE_FLOPS.get(backend.current(), COMPILE_FLOPS["gpu"])
            lengths = [[len(token_ids[i]) for i in batch] for batch in order]
            narrow = length_bucket(max(max(batch) for batch in lengths), max_len)
            # a PackedEncoder need not be a transformer: without its shapes, no FLOPs to compare
            config = getattr(getattr(encoder, "train_view", encoder), "config", None)
            widths = (narrow,) if config is None else (narrow, 2 * narrow)
            self.width, needs, counts = _packing(lengths, widths, config, self.batch_size, compile_flops)
            rounded = {r: -(-r // n_devices) * n_devices for r in counts}
            self.row_counts = tuple(sorted(set(rounded.values())))
            self._rows = np.asarray([rounded[_fewest(counts, n)] for n in needs])
            self.rows = self.row_counts[-1]
        else:
            longest = max(max(1, len(t)) for t in token_ids)
            self.length = length_bucket(longest, max_len) if fixed else None

    @property
    def batch_size(self) -> int:
        return self.order.shape[1]

    def rows_of(self, step: int) -> int:
        """The rows of step ``step``'s packed batch: the fewest of :attr:`row_counts` that hold it."""
        return int(self._rows[step - 1])

    def __call__(self, step: int, rows: int | None = None) -> Any:
        """Step ``step``'s batch (1-based); packed, in ``rows`` rows (default :meth:`rows_of`)."""
        lists = [self.token_ids[i] for i in self.order[step - 1]]
        if self.packed:
            return self.encoder.pack(lists, rows=self.rows_of(step) if rows is None else rows, width=self.width)
        return _assemble(self, lists)


#: What one compilation of a training step costs, in FLOPs at the step's rate, per JAX backend
#: (:class:`Batches` gives a batch shape of its own only where it saves more): on this project's
#: 2-core CPU the float32 BERT-base SimCSE step compiles in about 6 s and runs about 160 GFLOP/s
#: (benchmarks/README.md); on an H200 the bfloat16 step compiles in 30-38 s and runs 130-180
#: TFLOP/s (``benchmarks/results/gpu_unrolled.json``).
COMPILE_FLOPS = {"cpu": 1e12, "gpu": 5e15, "tpu": 5e15}


def row_counts(needs: Sequence[int], flops, compile_flops: float) -> list[int]:
    """The row counts a run compiles: the most rows any step ``needs``, and greedily the count that
    saves the most ``flops(rows)`` over the steps (each taking the fewest rows that hold it)
    while that saving exceeds ``compile_flops``. Ascending."""
    need_counts = sorted(Counter(needs).items())
    counts = [max(needs)]
    cost = _run_flops(need_counts, counts, flops)
    while True:
        trials = [(_run_flops(need_counts, sorted([*counts, n]), flops), n) for n, _ in need_counts if n not in counts]
        if not trials:
            return counts
        best, n = min(trials)
        if cost - best <= compile_flops:
            return counts
        counts, cost = sorted([*counts, n]), best


def _packing(lengths: list[list[int]], widths: Sequence[int], config, batch_size: int,
             compile_flops: float) -> tuple[int, list[int], list[int]]:
    """Of ``widths``, the one whose run costs the fewest FLOPs (the step's at each batch's row
    count, plus ``compile_flops`` for each row count after the first; a tie: the first), with
    the rows each batch needs at it and its :func:`row_counts`. Without a transformer
    ``config`` every shape costs the same: the first width, one row count."""
    plans = []
    for width in widths:
        def flops(rows: int, width: int = width) -> float:
            return 0.0 if config is None else transformer_step_flops(config, rows, width, batch_size, pooler=False,
                                                                     packed=True)

        needs = _rows_needed(lengths, width)
        counts = row_counts(needs, flops, compile_flops)
        cost = _run_flops(Counter(needs).items(), counts, flops)
        if len(counts) > 1:  # (not compile_flops x 0: an infinite compilation would make every cost nan)
            cost += compile_flops * (len(counts) - 1)
        plans.append((cost, width, needs, counts))
    _, width, needs, counts = min(plans, key=lambda plan: plan[0])
    return width, needs, counts


def _run_flops(need_counts, counts: Sequence[int], flops) -> float:
    """The FLOPs of a run whose steps need ``need_counts`` rows ((rows, steps) pairs), each step
    in the fewest of the ascending row ``counts`` that hold it."""
    return sum(k * flops(_fewest(counts, n)) for n, k in need_counts)


def _fewest(counts: Sequence[int], need: int) -> int:
    """The fewest of the ascending row ``counts`` that hold ``need`` rows."""
    return counts[bisect.bisect_left(counts, need)]


def _rows_needed(lengths: list[list[int]], width: int) -> list[int]:
    """The rows of ``width`` tokens that first-fit packing needs for each batch of sentence ``lengths``."""
    from gradlab.real.packing import first_fit

    needs = []
    for batch in lengths:
        (placed,) = first_fit(batch, width=width, rows=len(batch), slots=len(batch))
        needs.append(int(placed[:, 1].max()) + 1)
    return needs


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
        self.row_counts = (self.rows,)

    def rows_of(self, step: int) -> int:
        """Every step's rows: one sentence a row (:class:`Batches`' protocol)."""
        return self.rows

    def __call__(self, step: int, rows: int | None = None) -> Any:
        if rows not in (None, self.rows):
            raise ValueError(f"a streamed batch has {self.rows} rows, not {rows}")
        if step < self.next_step:
            raise ValueError(f"a streamed corpus goes forward only: step {step} after {self.next_step - 1}")
        for _ in range(step - self.next_step):  # skipped steps: read, not tokenized
            next(itertools.islice(self.lines, self.batch_size - 1, None), None)
        self.next_step = step + 1
        return _assemble(self, self.encoder.token_ids(list(itertools.islice(self.lines, self.batch_size))))
