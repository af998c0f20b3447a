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

The common draws are the same numbers computed on the host: the key tree and the words by
``threefry2x32`` in NumPy (bit for bit JAX's Threefry-2x32, a few ms for a paper-size map),
and only the word-to-number map compiled. A jitted key tree compiled for about 0.7 s, most
of a first run's wait (Threefry-2x32 inlined once per ``fold_in``, ``split`` and draw).
"""

from __future__ import annotations

import collections
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gradlab._cache import stored_program
from gradlab.geometry import fold_angle

COMMON_TAG = 0xFFFFFFFF


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
    # jax.extend imports Pallas (70 ms): imported here, where it is needed
    from jax.extend.random import threefry_2x32

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


def standard_normal_pieces(key, shape, dtype, *, halves: bool = True) -> tuple:
    """:func:`standard_normal` of ``shape`` (R, C) in pieces, bit for bit: per part of its rows,
    the part's first column and its other columns, each drawn from its own counters.

    In float32 the flat draws' elements i and i + m (m: half their count) are the two words of
    Threefry block i, so rows r and r + R/2 share their blocks. With R even there are two parts,
    the halves of the rows: each piece hashes its blocks once and keeps one word of each, the
    other half's piece the other word. A program that reduces each piece apart then needs no
    array of the draws' size in memory: no concatenation of the words, and no piece with two
    consumers (the positives' column and the negatives' reduction) for XLA to keep. Compiled for
    an H100, the independent mode's InfoNCE map moved 24.0 GB with the whole draws and 0.48 GB in
    pieces (``benchmarks/gpu_aot.py --engine``). Otherwise (``halves=False``; float64, whose
    64-bit word is one block already; R odd; another PRNG implementation) one part, the whole
    draws' columns.

    Returns:
      ``((first column (R/k, 1), other columns (R/k, C - 1)), ...)`` for the k parts, in row
      order: concatenated along the rows, each is the draws' columns.
    """
    dtype = jnp.dtype(dtype)
    rows, cols = shape
    if not halves or dtype.itemsize == 8 or rows % 2 or str(jax.random.key_impl(key)) != "threefry2x32":
        z = standard_normal(key, shape, dtype)
        return ((z[:, :1], z[:, 1:]),)
    from jax.extend.random import threefry2x32_p

    m = np.uint32(rows * cols // 2)
    k0, k1 = jax.random.key_data(key)
    starts = jnp.arange(rows // 2, dtype=jnp.uint32)[:, None] * np.uint32(cols)
    words = []
    for lo, hi in ((0, 1), (1, cols)):  # the blocks of threefry_2x32(k, arange(2m)): counters (j, j + m)
        j = starts + jnp.arange(lo, hi, dtype=jnp.uint32)
        words.append(threefry2x32_p.bind(k0, k1, j, j + m))
    return tuple(tuple(normal_from_bits(w[half], dtype) for w in words) for half in (0, 1))


@functools.cache
def normal_bound(dtype_name: str) -> float:
    """The largest |z| ``normal_from_bits`` can return for ``dtype_name`` (its extreme words)."""
    dtype = jnp.dtype(dtype_name)
    uint = jnp.uint64 if dtype.itemsize == 8 else jnp.uint32
    extremes = jnp.asarray([0, np.iinfo(uint).max], uint)
    return float(jnp.max(jnp.abs(normal_from_bits(extremes, dtype))))


# --- the common draws on the host ------------------------------------------------------------
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = np.uint32(0x1BD11BDA)
_HOST_BLOCKS = 2**20  # Threefry blocks per host chunk (bounds the temporaries to a few MB each)


def threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011, Random123) in NumPy ``uint32``.

    The block cipher behind ``jax.random``'s default keys, bit for bit: key (k0, k1) and
    counters (x0, x1), all broadcast together. Returns the two output words.
    """
    k0, k1, x0, x1 = np.broadcast_arrays(*(np.asarray(a, dtype=np.uint32) for a in (k0, k1, x0, x1)))
    ks = (k0, k1, k0 ^ k1 ^ _KS_PARITY)
    with np.errstate(over="ignore"):  # arithmetic mod 2^32 (0-d operands would warn)
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                x0 = x0 + x1
                x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _common_bits(seed: int, batches: int, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The words behind the common draws, by the key tree of the module docstring.

    ``jax.random.key(seed)`` is (seed >> 32, seed mod 2^32); ``fold_in(k, d)`` and the i-th key
    of ``split(k)`` are the block of k at counters (0, d) and (0, i); a uniform's word is the
    XOR of the block at (0, 0) (float64: both words); ``standard_normal`` takes the blocks at
    (i, m + i), m = ⌈words / 2⌉. Returns (normal bits (B, N), uniform bits (B,)).
    """
    wide = jnp.dtype(dtype).itemsize == 8
    root = threefry2x32(np.uint32(seed >> 32), np.uint32(seed & 0xFFFFFFFF), 0, COMMON_TAG)
    kb = threefry2x32(*root, 0, np.arange(batches, dtype=np.uint32))  # fold_in(root, b)
    k_angle, k_alpha = threefry2x32(*kb, 0, 0), threefry2x32(*kb, 0, 1)  # split(kb)
    a0, a1 = threefry2x32(*k_alpha, 0, 0)  # the uniform's block
    words = n * (2 if wide else 1)
    m = (words + 1) // 2
    i = np.arange(m, dtype=np.uint32)
    out = np.empty((batches, 2 * m), dtype=np.uint32)
    step = max(1, _HOST_BLOCKS // m)
    for b in range(0, batches, step):
        c0, c1 = k_angle[0][b:b + step, None], k_angle[1][b:b + step, None]
        out[b:b + step, :m], out[b:b + step, m:] = threefry2x32(c0, c1, i, i + np.uint32(m))
    if wide:
        hi, lo = out[:, :n].astype(np.uint64), out[:, n:].astype(np.uint64)
        return (hi << np.uint64(32)) | lo, (a0.astype(np.uint64) << np.uint64(32)) | a1
    return out[:, :words], a0 ^ a1


def _uniform_from_bits(bits: np.ndarray, dtype) -> np.ndarray:
    """``jax.random.uniform``'s map from words to [0, 1) (exact: a shift, a bit cast, minus one)."""
    dtype = np.dtype(dtype)
    finfo = np.finfo(dtype)
    one = np.array(1.0, dtype).view(bits.dtype)
    return (((bits >> bits.dtype.type(finfo.bits - finfo.nmant)) | one).view(dtype) - dtype.type(1.0)).astype(dtype)


# One elementwise program; the positive's column is split off on the host (splitting inside
# the program made XLA duplicate the erfinv fusion per output: twice the compile time).
@functools.cache
def _normal_map(dtype_name: str):
    return jax.jit(functools.partial(normal_from_bits, dtype=dtype_name))


def common_draws(protocol):
    """Standard draws shared by every cell: z_pos (B,), z_neg (B, N−1), u_alpha (B,), host arrays.

    The numbers of the jitted key tree (``fold_in(fold_in(key(seed), COMMON_TAG), b)``, split
    into the angle and α keys), computed on the host with one small compiled map.
    """
    dtype = protocol.jnp_dtype()
    if dtype.itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError("float64 draws need jax.config.update('jax_enable_x64', True)")
    bits, ubits = _common_bits(protocol.seed, protocol.batches, protocol.batch_size, dtype)
    z = np.asarray(stored_program(_normal_map(dtype.name), (bits,), ("normal_from_bits", dtype.name))(bits))
    return z[:, 0].copy(), np.ascontiguousarray(z[:, 1:]), _uniform_from_bits(ubits, dtype)


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


#: Common draws kept for the last few (seed, B, N, dtype): a map at a protocol seen before
#: (another τ, another loss, a slider moved in the explorer) starts from them on the device.
_KEPT_DRAWS: collections.OrderedDict = collections.OrderedDict()
_KEEP = 4


def draws_for(protocol) -> CommonDraws | CellDraws:
    """The draws of a map under ``protocol``'s mode.

    Common mode: computed once per (seed, batches, batch size, dtype) and kept, as device
    arrays, for the last few such protocols (they do not depend on anything else).
    """
    if protocol.mode == "common":
        from gradlab._memory import check_fits

        b, n = protocol.batches, protocol.batch_size
        key = (protocol.seed, b, n, protocol.jnp_dtype().name)
        if key in _KEPT_DRAWS:
            _KEPT_DRAWS.move_to_end(key)
        else:
            check_fits(f"the common draws of {b} batches of N = {n}", b * (n + 1) * protocol.jnp_dtype().itemsize,
                       2 * b * n * 4)  # the random bits behind them
            _KEPT_DRAWS[key] = tuple(jax.device_put(a) for a in common_draws(protocol))
            while len(_KEPT_DRAWS) > _KEEP:
                _KEPT_DRAWS.popitem(last=False)
        z_pos, z_neg, u = _KEPT_DRAWS[key]
        return CommonDraws(z_pos, z_neg, u, protocol.sigma_pos, protocol.sigma_neg)
    return CellDraws(protocol.seed, protocol.batches, protocol.batch_size, protocol.jnp_dtype(),
                     protocol.sigma_pos, protocol.sigma_neg)


def cell_draws(seed_or_root, cell, batches: int, n: int, dtype):
    """Independent-mode draws of one cell (traceable): z_pos (B,), z_neg (B, N−1), u (B,)."""
    ((z_pos, z_neg),), u = cell_draw_pieces(seed_or_root, cell, batches, n, dtype, pieces=False)
    return z_pos[:, 0], z_neg, u


def cell_draw_pieces(seed_or_root, cell, batches: int, n: int, dtype, *, pieces: bool = True):
    """:func:`cell_draws`' normals as ``((z_pos (B', 1), z_neg (B', N−1)), ...)`` per part of the
    batches (B' rows each; :func:`standard_normal_pieces`, in halves with ``pieces``), and u (B,)."""
    root = seed_or_root
    if isinstance(root, (int, np.integer)):
        root = jax.random.key(int(root))
    k_angle, k_alpha = jax.random.split(jax.random.fold_in(root, cell))
    z = standard_normal_pieces(k_angle, (batches, n), dtype, halves=pieces)
    return z, jax.random.uniform(k_alpha, (batches,), dtype)


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
