"""Keys and draws: common random numbers per batch, or independent draws per cell.

Key tree (root = ``jax.random.key(seed)``):

* common mode: batch b uses ``fold_in(fold_in(root, COMMON_TAG), b)``, split into an
  angle key (N standard normals: z[0] for the positive, z[1:] for the negatives) and
  an α key (one uniform on [0, 1)).
* independent mode: cell ``c = i_pos · G_neg + i_neg`` uses ``fold_in(root, c)``, split
  the same way into (B, N) normals and (B,) uniforms.

Draws depend only on the seed and (b or c), never on chunking or devices.

The normals have ``jax.random.normal``'s law *and* its map from 32-bit (float64: 64-bit)
words to numbers (``normal_from_bits``); only the words come cheaper. JAX's default
partitionable Threefry spends one Threefry-2x32 block per 32-bit word and keeps the XOR
of its two outputs; ``standard_normal`` keeps both outputs, so a block gives two words.
For float32 that halves the hashing, which was 0.32 ms of an independent-mode cell's
0.88 ms; float64 already took one block per 64-bit word, and only the counters differ.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

from gradlab.geometry import fold_angle

COMMON_TAG = 0xFFFFFFFF


def root_key(seed: int):
    return jax.random.key(seed)


def normal_from_bits(bits, dtype):
    """Standard normals from uniformly random words, by ``jax.random.normal``'s own map.

    The top mantissa bits give u in [−1 + ulp, 1) and z = √2 · erfinv(u). Args: ``bits``,
    uint32 words for float32, uint64 for float64; ``dtype``, the float dtype.
    """
    dtype = jnp.dtype(dtype)
    finfo = jnp.finfo(dtype)
    nbits = finfo.bits
    uint = bits.dtype
    one = np.array(1.0, dtype).view(uint)
    float_bits = jax.lax.shift_right_logical(bits, np.array(nbits - finfo.nmant, uint)) | one
    floats = jax.lax.bitcast_convert_type(float_bits, dtype) - np.array(1.0, dtype)
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = jnp.maximum(lo, floats * (np.array(1.0, dtype) - lo) + lo)
    return np.array(np.sqrt(2), dtype) * jax.lax.erf_inv(u)


def standard_normal(key, shape, dtype):
    """Standard normals of ``shape``: ``jax.random.normal``'s law and word-to-number map,
    with two words per Threefry-2x32 block instead of one (see the module docstring).

    A key of another PRNG implementation falls back to ``jax.random.normal``.
    """
    dtype = jnp.dtype(dtype)
    if dtype.itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError("float64 normals need jax.config.update('jax_enable_x64', True)")
    if str(jax.random.key_impl(key)) != "threefry2x32":
        return jax.random.normal(key, shape, dtype)
    n = math.prod(shape)
    words_per = jnp.finfo(dtype).bits // 32
    count = n * words_per
    words = threefry_2x32(jax.random.key_data(key), jnp.arange(count + count % 2, dtype=jnp.uint32))[:count]
    if words_per == 2:  # float64: one 64-bit word from a block's two outputs
        half = words.reshape(2, n).astype(jnp.uint64)
        bits = (half[0] << np.uint64(32)) | half[1]
    else:
        bits = words
    return normal_from_bits(bits.reshape(shape), dtype)


@functools.cache
def normal_bound(dtype_name: str) -> float:
    """The largest |z| ``normal_from_bits`` can return for ``dtype_name`` (its extreme words)."""
    dtype = jnp.dtype(dtype_name)
    uint = jnp.uint64 if dtype.itemsize == 8 else jnp.uint32
    extremes = jnp.asarray([0, np.iinfo(uint).max], uint)
    return float(jnp.max(jnp.abs(normal_from_bits(extremes, dtype))))


def _split_draws(key, shape, n, dtype):
    k_angle, k_alpha = jax.random.split(key)
    z = standard_normal(k_angle, (*shape, n), dtype)
    u = jax.random.uniform(k_alpha, shape, dtype)
    return z, u


@functools.cache
def _common_draws_fn(batches: int, n: int, dtype: str):
    def one(root, b):
        return _split_draws(jax.random.fold_in(root, b), (), n, dtype)

    @jax.jit
    def draws(seed):
        root = jax.random.fold_in(jax.random.key(seed), COMMON_TAG)
        z, u = jax.vmap(one, in_axes=(None, 0))(root, jnp.arange(batches, dtype=jnp.uint32))
        return z[:, 0], z[:, 1:], u

    return draws


def common_draws(protocol):
    """Standard draws shared by every cell: z_pos (B,), z_neg (B, N−1), u_alpha (B,)."""
    from gradlab._cache import memo_arrays

    dtype = protocol.jnp_dtype()
    fn = _common_draws_fn(protocol.batches, protocol.batch_size, dtype.name)
    return memo_arrays("common_draws", (protocol.seed, protocol.batches, protocol.batch_size, dtype.name),
                       lambda: fn(protocol.seed))


class CommonDraws(NamedTuple):
    """Common mode: one set of standard draws for every cell, and the scales of the angles.

    Attributes:
      z_pos: (B,) standard normals of the positive.
      z_neg: (B, N − 1) standard normals of the negatives.
      u: (B,) uniforms on [0, 1) (the α of Lemma 1).
      sigma_pos, sigma_neg: σ of θ_ii' and θ_ij'.
    """

    z_pos: jax.Array
    z_neg: jax.Array
    u: jax.Array
    sigma_pos: float
    sigma_neg: float

    @property
    def dtype(self):
        return self.z_pos.dtype


class CellDraws(NamedTuple):
    """Independent mode: cell c draws (B, N) normals from ``fold_in(key(seed), c)`` itself.

    Attributes:
      seed: the root seed.
      batches: B; batch_size: N (one positive, N − 1 negatives).
      dtype: the float dtype of the draws.
      sigma_pos, sigma_neg: σ of θ_ii' and θ_ij'.
    """

    seed: int
    batches: int
    batch_size: int
    dtype: np.dtype
    sigma_pos: float
    sigma_neg: float


def draws_for(protocol) -> CommonDraws | CellDraws:
    """The draws of a map under ``protocol``'s mode (computed once per map in common mode)."""
    if protocol.mode == "common":
        from gradlab._memory import check_fits

        b, n = protocol.batches, protocol.batch_size
        check_fits(f"the common draws of {b} batches of N = {n}", b * (n + 1) * protocol.jnp_dtype().itemsize,
                   2 * b * n * 4)  # the random bits behind them
        z_pos, z_neg, u = common_draws(protocol)
        return CommonDraws(z_pos, z_neg, u, protocol.sigma_pos, protocol.sigma_neg)
    return CellDraws(protocol.seed, protocol.batches, protocol.batch_size, protocol.jnp_dtype(),
                     protocol.sigma_pos, protocol.sigma_neg)


def cell_draws(seed_or_root, cell, batches: int, n: int, dtype):
    """Independent-mode draws of one cell (traceable): z_pos (B,), z_neg (B, N−1), u (B,)."""
    root = seed_or_root
    if isinstance(root, (int, np.integer)):
        root = jax.random.key(int(root))
    z, u = _split_draws(jax.random.fold_in(root, cell), (batches,), n, dtype)
    return z[:, 0], z[:, 1:], u


def apply_law(theta, law: str):
    """The sampling law on raw angles μ + σz: ``normal`` as is, ``reflected`` folded into [0, π]."""
    if law == "reflected":
        return fold_angle(theta)
    return theta


def sample_angles(protocol, mu_pos: float, mu_neg: float, *, cell: int = 0):
    """The angles one cell sees under the protocol's mode and law.

    Args:
      protocol: a ``Protocol``.
      mu_pos, mu_neg: the cell's means (radians).
      cell: the flat cell index (independent mode only; ``i_pos · G_neg + i_neg``).

    Returns:
      ``(theta_pos (B,), theta_neg (B, N−1))`` as JAX arrays of the protocol's dtype.
    """
    dtype = protocol.jnp_dtype()
    if protocol.mode == "common":
        z_pos, z_neg, _ = common_draws(protocol)
    else:
        z_pos, z_neg, _ = cell_draws(protocol.seed, cell, protocol.batches, protocol.batch_size, dtype)
    theta_pos = jnp.asarray(mu_pos, dtype) + jnp.asarray(protocol.sigma_pos, dtype) * z_pos
    theta_neg = jnp.asarray(mu_neg, dtype) + jnp.asarray(protocol.sigma_neg, dtype) * z_neg
    return apply_law(theta_pos, protocol.law), apply_law(theta_neg, protocol.law)
