"""Dropout masks from Threefry bits, four 16-bit draws per block, and the dropout of several views
of one batch in one forward, each view with the masks its own key draws (SimCSE's two views,
Gao et al. 2021)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.ad_checkpoint import checkpoint_name

__all__ = ["dropout_keep", "dropout", "split_keys"]


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
        return (keep if at is None else keep[tuple(at)]), _keep_scale(threshold, rate)
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
    return u >= jnp.uint32(threshold), _keep_scale(threshold, rate)


def _keep_threshold(key: Array, shape: tuple[int, ...], rate: float) -> int | None:
    """The 16-bit threshold of :func:`dropout_keep`, or None where it falls back to ``bernoulli``."""
    if shape[-1] % 4 or str(jax.random.key_impl(key)) != "threefry2x32":
        return None
    return int(round(rate * 65536))


def _keep_scale(threshold: int | None, rate: float) -> float:
    """``1 / P(keep)`` for :func:`_keep_threshold`'s ``threshold`` (None: ``bernoulli`` at ``1 - rate``)."""
    return 1.0 / (1.0 - rate) if threshold is None else 65536.0 / (65536 - threshold)


def split_keys(keys: Array, n: int) -> Array:
    """``jax.random.split(k, n)`` of each of ``keys`` (V,): (V, n), the keys of each view apart."""
    return jax.vmap(lambda k: jax.random.split(k, n))(keys)


def dropout(x: Array, rate: float, keys: Array | None, shape: tuple[int, ...] | None = None,
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
    scale = _keep_scale(_keep_threshold(keys[0], shape, rate), rate)
    # a layer's recomputation in the backward pass (remat) reuses the mask instead of redrawing it
    keep = checkpoint_name(keep, "dropout_keep")
    return jnp.where(keep, x * jnp.asarray(scale, x.dtype), jnp.zeros_like(x))
