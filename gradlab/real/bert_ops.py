"""BERT's operations with their backward passes written out: LayerNorm, dense layers, the
feed-forward's activation and second product, the exact GELU, the layers' stacked parameters
taken apart and their gradients stacked again.

Each computes what autodiff of its textbook formula computes (tests compare them in float64);
the backward passes are written for accuracy (parameter gradients summed over the batch's tokens
in float32 under mixed precision) and for the kernels XLA makes of them on a CPU and on a GPU
(the numbers each docstring quotes: benchmarks/README.md). :mod:`gradlab.real.bert` composes them
into the encoder.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from gradlab import backend

__all__ = ["COLUMN_SUM_BLOCK", "column_sum", "in_blocks", "vector_columns", "layer_norm", "dense", "side_by_side",
           "unstack", "with_last", "gelu", "activation", "act_dense", "feed_keeps_activation"]


#: On a GPU, a column sum (:func:`column_sum`) of a multiple of this many rows, at least twice
#: as many, runs in two stages: sums over blocks of this many rows, then over the blocks, and the
#: dense layers' bias gradients are such sums too (:func:`dense`); None: one reduction each, the
#: biases' autodiff's. With the layers unrolled, the sums over the blocks of the layers' vector
#: parameters run once per stacked parameter (:func:`in_blocks`). Read when a program is traced
#: (set it before any step is built). On an H200 the recipe's step spent about 0.9 ms of its 7.2
#: in these sums over its 2,304 tokens, one kernel each with too few blocks for its 768 to 3,072
#: outputs (11–15 µs for 3.5–14 MB); compiled for an H100, in two stages the step moves 11.99 GB
#: where one reduction each moves 12.19, in 750 kernels instead of 747 (benchmarks/README.md).
#: ``benchmarks/gpu.py``'s ``gradlab_bf16_one_stage_sums`` row times one reduction against this.
COLUMN_SUM_BLOCK: int | None = 64


def column_sum(a: Array, like: Array) -> Array:
    """The gradient of a vector parameter ``like`` added to every row of an array whose gradient is
    ``a``: the sum of ``a`` over every axis but the last, accumulated in float32 (at least), in
    ``like``'s dtype; for a parameter in n blocks (:func:`in_blocks`), the n sums over as many
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


#: The stacked vector parameters that :func:`in_blocks` leaves whole: the feed-forward's first
#: bias, whose partial sums XLA fuses into the GELU's backward kernel. In blocks, compiled for an
#: H100, XLA computed the feed-forward's pre-activation in kernels of its own (0.13 GB more a step).
_NOT_IN_BLOCKS = ("i_b",)


def in_blocks(stacked: dict[str, Array], rows: int) -> dict[str, Array]:
    """The stacked layer parameters with their vector parameters (L, H) in n blocks, (L, n H): the
    same vector n times over, in float32 (at least), n = ``rows`` / :data:`COLUMN_SUM_BLOCK`, on a
    GPU where the rows split so (else ``stacked`` itself). A layer reads the first block
    (:func:`_row`) and gives back its gradient's sums over n blocks of its rows
    (:func:`column_sum`); autodiff sums the blocks once for all layers, one small reduction per
    stacked vector where each layer's sum over its blocks was a kernel of its own: compiled for an
    H100, the SimCSE step of BERT-base launched 780 kernels instead of 839 when they came in, and
    moved the same bytes (benchmarks/gpu_aot.py). Flat (n H, not (n, H)), so that XLA lays the sums over the
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
    blocks (:func:`in_blocks`), in ``dtype``; else ``p`` itself."""
    return p if p.shape[-1] == width else p.reshape(-1, width)[0].astype(dtype)


def vector_columns(p: Array, width: int, start: int, stop: int) -> Array:
    """Entries ``start:stop`` of a vector parameter of ``width`` entries, in its blocks if it has any."""
    blocks = p.shape[-1] // width
    return p.reshape(blocks, width)[:, start:stop].reshape(-1)


def _ln_parts(x: Array, eps: float) -> tuple[Array, Array]:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    rstd = jax.lax.rsqrt(var + eps)
    return (x - mu) * rstd, rstd


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
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
    return (dx * rstd.astype(acc)).astype(xhat.dtype), column_sum(g * xhat, scale), column_sum(g, bias)


layer_norm.defvjp(_ln_fwd, _ln_bwd)


def dense(x: Array, w: Array, b: Array) -> Array:
    """``x @ w + b`` over the last axis of ``x``. On XLA's CPU backend, and on a GPU with
    :data:`COLUMN_SUM_BLOCK` set, its bias gradient is a :func:`column_sum` (a matrix-vector
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
    return (g @ w.T).astype(x.dtype), (rows_x.T @ rows_g).astype(w.dtype), column_sum(g, b)


_dense_summed.defvjp(_dense_fwd, _dense_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def side_by_side(apart: bool, *arrays: Array) -> Array:
    """``arrays`` concatenated along their last axis, whose backward pass slices the gradient back
    into one per array; with ``apart``, behind an optimization barrier, so that each slice is an
    array of its own (:data:`gradlab.real.bert.QKV_GRADIENTS_APART`: BERT's Q, K and V)."""
    return jnp.concatenate(arrays, axis=-1)


def _side_by_side_fwd(apart, *arrays):
    return jnp.concatenate(arrays, axis=-1), tuple(a.shape[-1] for a in arrays)


def _side_by_side_bwd(apart, widths, g):
    parts = jnp.split(g, np.cumsum(widths)[:-1].tolist(), axis=-1)
    return tuple(jax.lax.optimization_barrier(parts) if apart else parts)


side_by_side.defvjp(_side_by_side_fwd, _side_by_side_bwd)


@jax.custom_vjp
def unstack(stacked: dict[str, Array]) -> tuple[dict[str, Array], ...]:
    """The entries of stacked parameters, layer by layer (entry i: ``{name: a[i]}``), whose backward
    stacks the entries' gradients, one concatenation per parameter.

    Autodiff of the entries taken one by one writes each entry's gradient into a zero-filled stack,
    a chain of in-place updates that XLA's GPU compiler fuses into the optimizer's update and the
    gradient's norm: kernels that took ptxas minutes, the SimCSE step of BERT-base 116.8 s to
    compile for an H100 where the stacked gradients take 31.2 s (``benchmarks/gpu_aot.py``)."""
    names = list(stacked)
    return tuple(dict(zip(names, entry, strict=True)) for entry in zip(*(stacked[k] for k in names), strict=True))


def _unstack_fwd(stacked):
    return unstack(stacked), None


def _unstack_bwd(_, entries):
    return (jax.tree_util.tree_map(lambda *g: jnp.stack(g), *entries),)


unstack.defvjp(_unstack_fwd, _unstack_bwd)


@jax.custom_vjp
def with_last(stacked: Array) -> tuple[Array, Array]:
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


with_last.defvjp(_with_last_fwd, _with_last_bwd)


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


def activation(name: str):
    if name == "gelu":
        return gelu
    if name == "gelu_new":
        return functools.partial(jax.nn.gelu, approximate=True)
    return jax.nn.relu


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def act_dense(act: str, keep: bool, h: Array, w: Array, b: Array) -> Array:
    """``activation(h) @ w + b`` (the feed-forward's second half; ``act`` a ``hidden_act``), keeping
    ``h`` for the backward pass, which computes the activation's derivative there, and, with
    ``keep``, the activation too; without, the backward pass recomputes it.

    Autodiff keeps four arrays of ``h``'s size for the exact GELU (three for ReLU, six for the tanh
    GELU): in BERT-base, 62 % of what the layer loop keeps for its backward pass. Keeping one takes
    a quarter off the float32 SimCSE step's temporaries on a CPU (its page faults: 651,000 -> 478,000
    a step, benchmarks/README.md); recomputing one activation per element costs little next to
    the products around it. A GPU has the memory to spare, and there the recomputation costs
    traffic: at batch 512, a kernel and three passes over an array of ``h``'s size per layer
    (:func:`feed_keeps_activation`).

    The backward pass takes ``h`` through an optimization barrier, as ``jax.checkpoint`` does its
    recomputed inputs: in one program XLA would otherwise merge the recomputation with the forward
    pass's own (common subexpressions) and keep those values alive instead. Compiled for an H100,
    it did: the product before its bias, the exact GELU's ``erfc`` term and ``h / sqrt(2)`` were
    kept, three arrays of ``h``'s size per layer where one is needed; the barrier took 0.46 GB off
    the bfloat16 SimCSE step's 1.28 GB of temporaries (benchmarks/gpu_aot.py).
    """
    return _act_dense_fwd(act, keep, h, w, b)[0]


def _act_dense_fwd(act, keep, h, w, b):
    a = activation(act)(h)
    return a @ w + _row(b, w.shape[-1], w.dtype), (h, a if keep else None, w, b)


def _act_dense_bwd(act, keep, res, g):
    h, a, w, b = res
    h = jax.lax.optimization_barrier(h)  # what is computed from h here is not merged with the forward pass's
    a_again, pullback = jax.vjp(activation(act), h)
    da, dw, db = _dense_bwd((a_again if a is None else a, w, b), g)
    return (*pullback(da), dw, db)


act_dense.defvjp(_act_dense_fwd, _act_dense_bwd)


def feed_keeps_activation() -> bool:
    """Whether the feed-forward keeps its activation for the backward pass (:func:`act_dense`):
    off a CPU. Compiled for an H100, the bfloat16 SimCSE step of BERT-base then moves 0.16 GB less
    and holds 0.15 GB more; at batch 512, 4.8 GB less and 0.92 GB more, with 12 kernels fewer
    (benchmarks/gpu_aot.py). On a CPU the memory is the cost (page faults)."""
    return backend.current() != "cpu"
