"""The MiniLM encoder: any BERT or RoBERTa checkpoint as a sentence encoder in JAX
(all-MiniLM-L6-v2 by default), tokenizing, packing and pooling around the forward pass of
:mod:`gradlab.real.bert`; loaded and saved by :mod:`gradlab.real.hf`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jax import Array

from gradlab.real.bert import compute_params, embed, embed_packed
from gradlab.real.bert_config import BertConfig, PoolingConfig
from gradlab.real.packing import Packed, first_fit, pack, packed_calls, pad_ids, run_packed_calls

__all__ = ["MiniLM", "BertArchitecture"]


@dataclasses.dataclass(frozen=True)
class BertArchitecture:
    """A :class:`MiniLM`'s forward passes without its weights or tokenizer (hashable).

    Two encoders with equal architectures compute the same functions of their parameters, so a
    jitted training step built on one serves the other (:func:`gradlab.real.step.make_train_step`
    shares it between the runs of a process); it holds no array, so a step kept for later runs
    keeps no weights alive.
    """

    config: BertConfig
    pooling: PoolingConfig
    remat: bool = False
    unroll: bool | None = None

    def compute_params(self, params: dict, dtype: Any) -> dict:
        """The parameters a forward in ``dtype`` reads (mixed precision; :func:`gradlab.real.bert.compute_params`)."""
        return compute_params(params, dtype)

    def forward(self, params: dict, frozen: None, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """Sentence embeddings (B, H) of a padded batch (``frozen`` is unused); dropout iff ``key``
        is given, (V, B, H) for (V,) keys (:func:`gradlab.real.bert.embed`)."""
        del frozen
        return embed(params, input_ids, attention_mask, config=self.config, pooling=self.pooling, key=key,
                     remat=self.remat, unroll=self.unroll)

    def forward_packed(self, params: dict, frozen: None, packed: Packed, key: Array | None = None) -> Array:
        """Sentence embeddings (S, H) of a :class:`Packed` batch; dropout iff ``key`` is given, (V, S, H)
        for (V,) keys (:func:`gradlab.real.bert.embed_packed`)."""
        del frozen
        return embed_packed(params, packed, config=self.config, pooling=self.pooling, key=key, remat=self.remat,
                            unroll=self.unroll)


@dataclasses.dataclass
class MiniLM:
    """A BERT or RoBERTa sentence encoder in JAX (all-MiniLM-L6-v2 by default).

    :func:`load_minilm` and :func:`load_transformer` make one; it is a
    :class:`gradlab.real.PackedEncoder`.

    Attributes:
      params: pytree of float arrays (trainable); ``params["pooler"]`` iff the pooling is ``cls``.
      config: :class:`BertConfig`.
      pooling: :class:`PoolingConfig` (avg + normalize for all-MiniLM-L6-v2).
      tokenizer: a ``tokenizers.Tokenizer`` (truncation at ``max_seq_length``, no padding).
      max_seq_length: 256 for all-MiniLM-L6-v2 (``sentence_bert_config.json``), else the
        position table's length (:attr:`BertConfig.max_positions`).
      source: the directory or zip it was loaded from (:func:`save_transformer` copies its
        config and tokenizer).
      remat: training forwards recompute each layer in the backward pass instead of storing
        its activations (less memory, about a third more forward compute; same numbers).
      unroll: unroll the loop over layers (the numbers are the same). None (the default): on
        a GPU, where the unrolled step runs a third faster than the ``lax.scan`` (an H200, the
        SimCSE step of BERT-base: 7.1 against 9.8 ms pipelined, benchmarks/README.md) and
        compiles in 29 s instead of 8 (once: the programs are cached); rolled elsewhere.
    """

    params: dict
    config: BertConfig
    pooling: PoolingConfig
    tokenizer: Any
    max_seq_length: int = 256
    source: Path | None = None
    remat: bool = False
    unroll: bool | None = None

    # -- tokenization -----------------------------------------------------------
    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids (with [CLS] ... [SEP], truncated to ``max_seq_length``), unpadded."""
        if isinstance(sentences, str):
            raise TypeError("sentences must be a sequence of strings, not one string")
        return [e.ids for e in self.tokenizer.encode_batch(list(sentences))]

    def tokenize(self, sentences: Sequence[str], pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both (B, L) int32, right-padded with 0.

        L is ``pad_to`` or the length bucket of the longest sentence.
        """
        return pad_ids(self.token_ids(sentences), self.max_seq_length, pad_to)

    # -- the model as a pure function ----------------------------------------------
    @property
    def dim(self) -> int:
        """Embedding dimension D (the hidden size)."""
        return self.config.hidden_size

    @property
    def frozen(self) -> None:
        """No frozen part: every weight is in ``params`` (the training-loop protocol)."""
        return None

    @property
    def architecture(self) -> BertArchitecture | None:
        """The forward passes without the weights (:class:`BertArchitecture`), by which runs of one
        process share their training step; None for a subclass, whose forward may be its own."""
        return self._architecture if type(self) is MiniLM else None

    @property
    def _architecture(self) -> BertArchitecture:
        return BertArchitecture(self.config, self.pooling, self.remat, self.unroll)

    def compute_params(self, params: dict, dtype: Any) -> dict:
        """The parameters a forward in ``dtype`` reads (mixed precision; :func:`gradlab.real.bert.compute_params`)."""
        return self._architecture.compute_params(params, dtype)

    def forward(self, params: dict, frozen: None, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """:meth:`apply` in the training-loop protocol (``frozen`` is unused)."""
        return self._architecture.forward(params, frozen, input_ids, attention_mask, key)

    def apply(self, params: dict, input_ids: Array, attention_mask: Array, key: Array | None = None) -> Array:
        """Sentence embeddings (B, H) from token ids; dropout iff ``key`` is given. Pure, jittable.

        With (V,) keys: (V, B, H), V dropout views in one forward (:func:`gradlab.real.bert.embed`)."""
        return self._architecture.forward(params, None, input_ids, attention_mask, key)

    def encode(self, sentences: Sequence[str], *, batch_size: int = 64, params: dict | None = None) -> np.ndarray:
        """Embeddings (N, H) float32 of ``sentences`` (eval mode, no dropout).

        The sentences are packed (:class:`Packed`): a forward call takes ``batch_size`` rows
        of C tokens, C the length bucket of the longest sentence, each row holding as many
        whole sentences as fit (:func:`first_fit`, longest first). Every call has the same shape, so
        the forward compiles once per C, and no compute goes to padding beyond the rows'
        ends. Each embedding equals the one of the sentence encoded alone.
        """
        return self.embedder(sentences, batch_size=batch_size)(self.params if params is None else params)

    def embedder(self, sentences: Sequence[str], *, batch_size: int = 64):
        """``params -> encode(sentences, params=params)`` with the tokenizing and packing done once
        (an evaluation set scored many times during training)."""
        calls = packed_calls(self.token_ids(sentences), rows=batch_size, max_len=self.max_seq_length)
        forward = functools.partial(embed_packed, config=self.config, pooling=self.pooling)  # eval mode: no key
        return lambda params: run_packed_calls(lambda packed: forward(params, packed), calls, len(sentences),
                                               self.config.hidden_size)

    def pack(self, token_ids: Sequence[Sequence[int]], *, rows: int, width: int) -> Packed:
        """All of ``token_ids`` as one :class:`Packed` batch of (rows, width), slots in input order.

        The training-loop protocol: a batch of N sentences is packed into one fixed shape.
        Raises ValueError if they do not fit.
        """
        lengths = [len(t) for t in token_ids]
        calls = first_fit(lengths, width=width, rows=rows, slots=len(lengths))
        if len(calls) > 1:
            raise ValueError(f"{len(lengths)} sentences ({sum(lengths)} tokens) do not fit {rows} rows of {width}")
        placement = calls[0][np.argsort(calls[0][:, 0])]
        packed, _ = pack(token_ids, placement, width=width, rows=rows, slots=len(lengths))
        return packed

    def forward_packed(self, params: dict, frozen: None, packed: Packed, key: Array | None = None) -> Array:
        """Sentence embeddings (S, H) of a :class:`Packed` batch; dropout iff ``key`` is given. Pure.

        With (V,) keys: (V, S, H), V dropout views in one forward (:func:`gradlab.real.bert.embed_packed`)."""
        return self._architecture.forward_packed(params, frozen, packed, key)
