"""A light sentence encoder for fast CPU experiments.

MiniLM's (frozen) input token embeddings, mean-pooled over the sentence's word pieces
(special tokens excluded), followed by a trainable affine projection:

    e(s) = W^T · mean_{t in s} Drop(E[t]) + b,      E: (V, 384) from all-MiniLM-L6-v2

The projection starts orthogonal (seeded), so before training the cosines — and the
STS-B score — are those of the mean-pooled token embeddings themselves, whatever the seed.
Dropout on the token embeddings makes SimCSE-style views.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from gradlab.real.dropout import dropout_keep
from gradlab.real.hf import load_minilm
from gradlab.real.minilm import MiniLM
from gradlab.real.packing import length_bucket, pad_ids

__all__ = ["LightEncoder", "LightArchitecture", "load_light", "light_from_minilm", "init_projection"]


@jax.jit
def _eval_forward(params: dict, table: Array, input_ids: Array, attention_mask: Array) -> Array:
    """Eval-mode light forward, shared by every instance (compiled once per shape)."""
    x = table[input_ids]
    m = attention_mask.astype(x.dtype)[..., None]
    pooled = jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
    return pooled @ params["w"] + params["b"]


def init_projection(key: Array, d_in: int, d_out: int, *, dtype=jnp.float32) -> dict:
    """An orthogonal (semi-orthogonal if d_in != d_out) projection and a zero bias."""
    if d_in < 1 or d_out < 1:
        raise ValueError(f"projection sizes must be >= 1, got {d_in} -> {d_out}")
    w = jax.nn.initializers.orthogonal()(key, (d_in, d_out), dtype)
    return {"w": w, "b": jnp.zeros((d_out,), dtype)}


@dataclasses.dataclass(frozen=True)
class LightArchitecture:
    """A :class:`LightEncoder`'s forward pass without its arrays (hashable; runs of one process with
    equal architectures share their training step, :func:`gradlab.real.step.make_train_step`)."""

    dropout: float = 0.1

    def forward(self, params: dict, frozen: Array, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """Sentence embeddings (B, D) with the token table ``frozen`` (V, H) passed explicitly.

        Mean of (dropped-out) token embeddings over the mask, then ``@ w + b``.
        Dropout iff ``key`` is given. Pure, jittable.
        """
        x = frozen[input_ids]  # (B, L, H)
        if key is not None and self.dropout > 0:
            keep, scale = dropout_keep(key, x.shape, self.dropout)
            x = jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros_like(x))
        m = attention_mask.astype(x.dtype)[..., None]
        pooled = jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
        return pooled @ params["w"] + params["b"]


@dataclasses.dataclass
class LightEncoder:
    """Mean-pooled frozen token embeddings + a trainable projection.

    Attributes:
      params: ``{"w": (H, D), "b": (D,)}`` — the trainable part.
      embeddings: (V, H) frozen token embedding table.
      tokenizer: a ``tokenizers.Tokenizer``.
      dropout: rate of dropout on token embeddings for training views.
      max_seq_length: truncation length in word pieces.
    """

    params: dict
    embeddings: Array
    tokenizer: Any
    dropout: float = 0.1
    max_seq_length: int = 128

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Word-piece ids without [CLS]/[SEP], truncated to ``max_seq_length``."""
        if isinstance(sentences, str):
            raise TypeError("sentences must be a sequence of strings, not one string")
        encs = self.tokenizer.encode_batch(list(sentences), add_special_tokens=False)
        return [e.ids[: self.max_seq_length] for e in encs]

    def tokenize(self, sentences: Sequence[str], pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), (B, L) int32, right-padded."""
        return pad_ids(self.token_ids(sentences), self.max_seq_length, pad_to)

    @property
    def dim(self) -> int:
        """Embedding dimension D (the projection's output)."""
        return int(self.params["w"].shape[1])

    @property
    def frozen(self) -> Array:
        """The non-trained part, passed to :meth:`forward` as an argument (not a jit constant)."""
        return self.embeddings

    @property
    def architecture(self) -> LightArchitecture | None:
        """The forward pass without the arrays (:class:`LightArchitecture`), by which runs of one
        process share their training step; None for a subclass, whose forward may be its own."""
        return self._architecture if type(self) is LightEncoder else None

    @property
    def _architecture(self) -> LightArchitecture:
        return LightArchitecture(self.dropout)

    def forward(self, params: dict, frozen: Array, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """Sentence embeddings (B, D) with the token table ``frozen`` (V, H) passed explicitly
        (:meth:`LightArchitecture.forward`)."""
        return self._architecture.forward(params, frozen, input_ids, attention_mask, key)

    def apply(self, params: dict, input_ids: Array, attention_mask: Array, key: Array | None = None) -> Array:
        """:meth:`forward` with this encoder's own token table."""
        return self.forward(params, self.embeddings, input_ids, attention_mask, key)

    def encode(self, sentences: Sequence[str], *, batch_size: int = 256, params: dict | None = None) -> np.ndarray:
        """Embeddings (N, D) float32 (eval mode, no dropout)."""
        params = self.params if params is None else params
        ids = self.token_ids(sentences)
        n = len(ids)
        out = np.zeros((n, params["w"].shape[1]), dtype=np.float32)
        order = np.argsort([len(x) for x in ids], kind="stable")
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            L = length_bucket(max(1, max(len(ids[i]) for i in idx)), self.max_seq_length)
            tok = np.zeros((batch_size, L), dtype=np.int32)
            mask = np.zeros((batch_size, L), dtype=np.int32)
            for r, i in enumerate(idx):
                tok[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            emb = _eval_forward(params, self.embeddings, tok, mask)
            out[idx] = np.asarray(emb, dtype=np.float32)[: len(idx)]  # sliced on the host: no program per length
        return out


def light_from_minilm(
    base: MiniLM, *, dim: int = 384, seed: int = 0, dropout: float = 0.1, max_seq_length: int = 128
) -> LightEncoder:
    """A light encoder on the token embeddings and tokenizer of an already loaded :class:`MiniLM`."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1:
        raise ValueError(f"max_seq_length must be an integer >= 1, got {max_seq_length!r}")
    table = base.params["embeddings"]["word"]
    params = init_projection(jax.random.key(seed), table.shape[1], dim, dtype=table.dtype)
    return LightEncoder(params, table, base.tokenizer, dropout, max_seq_length)


def load_light(
    path: str | Path | None = None,
    *,
    dim: int = 384,
    seed: int = 0,
    dropout: float = 0.1,
    max_seq_length: int = 128,
    dtype=jnp.float32,
) -> LightEncoder:
    """The light encoder on all-MiniLM-L6-v2's token embeddings (or the model at ``path``).

    Args:
      path: model zip or directory (default: the shipped all-MiniLM-L6-v2).
      dim: output dimension D of the projection.
      seed: seeds the orthogonal initial projection.
      dropout: token-embedding dropout rate for training views, in [0, 1).
      max_seq_length: truncation in word pieces.
    """
    return light_from_minilm(
        load_minilm(path, dtype=dtype), dim=dim, seed=seed, dropout=dropout, max_seq_length=max_seq_length
    )
