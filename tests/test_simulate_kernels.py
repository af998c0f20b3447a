"""The simulation's own numerics: the float32 cosine, the standard-normal sampler and the
one-pass log-sum-exp of the negatives' table.

Witnesses: float64 NumPy cos (exact to far below a float32 ulp), jax.random.normal's own
word-to-number map, a NumPy Threefry-2x32 written from the Random123 specification,
a Kolmogorov–Smirnov test of the law, and a float64 NumPy log-sum-exp (max-shifted, exact
to far below a float32 ulp).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import gradlab
from gradlab.simulate import Protocol, gd_map, sample_angles

# private on purpose: the sampling and trigonometry kernels are the point of this file
from gradlab.simulate._sampling import (
    COMMON_TAG,
    common_draws,
    normal_bound,
    normal_from_bits,
    standard_normal,
    standard_normal_pieces,
    threefry2x32,
)
from gradlab.simulate._stats import logsumexp_one_pass
from gradlab.simulate._trig import COS_F32_LIMIT, cos_f32, cos_for


# --- cos_f32 -----------------------------------------------------------------------------
def _ulp_error(got, x):
    truth = np.cos(x.astype(np.float64))
    ulp = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    err = np.abs(np.asarray(got, np.float64) - truth)
    return err, err / ulp


def test_cos_f32_within_2_5_ulp_over_its_range():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.uniform(-COS_F32_LIMIT, COS_F32_LIMIT, 400_000),
        rng.uniform(-4, 4, 200_000),
        rng.normal(0, 1e-3, 1000),
        [0.0, -0.0, COS_F32_LIMIT, -COS_F32_LIMIT],
    ]).astype(np.float32)
    err, ulps = _ulp_error(jax.jit(cos_f32)(x), x)
    assert ulps.max() <= 2.5 and err.max() <= 1e-7, (ulps.max(), err.max())
    assert float(cos_f32(np.float32(0))) == 1.0


def test_cos_f32_keeps_its_digits_next_to_the_zeros_of_cos():
    # the float32 numbers nearest k·π/2: |cos| is down to 1e-8, where a two-part split
    # of π/2 (or float64 π/2 itself, for large k) leaves no correct digit
    k = np.arange(-2600, 2601)
    near = (k * np.pi / 2).astype(np.float32)
    x = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))])
    _, ulps = _ulp_error(jax.jit(cos_f32)(x), x)
    assert ulps.max() <= 2.5, ulps.max()


def test_cos_for_picks_the_fast_cosine_only_where_it_is_accurate():
    assert cos_for(jnp.float32, 4.0) is cos_f32
    assert cos_for(jnp.float32, COS_F32_LIMIT + 1) is jnp.cos
    assert cos_for(jnp.float32, math.inf) is jnp.cos
    assert cos_for(jnp.float64, 4.0) is jnp.cos


# --- the standard-normal sampler -------------------------------------------------------------
def threefry2x32_numpy(key, x0, x1):
    """The host Threefry-2x32, checked against JAX's own in ``test_host_threefry_is_jax_threefry``."""
    return threefry2x32(key[0], key[1], x0, x1)


def test_host_threefry_is_jax_threefry():
    from jax.extend.random import threefry_2x32

    rng = np.random.default_rng(0)
    for _ in range(5):
        key = rng.integers(0, 2**32, size=2, dtype=np.uint32)
        count = rng.integers(0, 2**32, size=2 * 257, dtype=np.uint32)
        want = np.asarray(threefry_2x32(jnp.asarray(key), jnp.asarray(count)))  # blocks (count[i], count[257 + i])
        y0, y1 = threefry2x32(key[0], key[1], count[:257], count[257:])
        np.testing.assert_array_equal(np.concatenate([y0, y1]), want)


def _jax_common_draws(seed, batches, n, dtype):
    """The common draws by the key tree with jax.random itself (the jitted form they replace)."""
    root = jax.random.fold_in(jax.random.key(seed), COMMON_TAG)

    def one(b):
        k_angle, k_alpha = jax.random.split(jax.random.fold_in(root, b))
        return standard_normal(k_angle, (n,), dtype), jax.random.uniform(k_alpha, (), dtype)

    z, u = jax.vmap(one)(jnp.arange(batches, dtype=jnp.uint32))
    return z[:, 0], z[:, 1:], u


@pytest.mark.x64
@pytest.mark.parametrize("dtype, n", [("float32", 8), ("float32", 7), ("float64", 5)])
def test_common_draws_on_the_host_are_the_jax_key_tree(dtype, n):
    p = Protocol(grid=(2, 2), batches=37, batch_size=n, dtype=dtype, seed=11)
    got = common_draws(p)
    want = _jax_common_draws(11, 37, n, jnp.dtype(dtype))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.x64
def test_standard_normal_is_threefry_words_through_jax_map():
    key = jax.random.key(7)
    n = 1000  # float32: n words = both outputs of n/2 blocks on counters (i, n/2 + i)
    kd = np.asarray(jax.random.key_data(key), np.uint32)
    i = np.arange(n // 2, dtype=np.uint32)
    w0, w1 = threefry2x32_numpy(kd, i, i + np.uint32(n // 2))
    words = np.concatenate([w0, w1])
    got = standard_normal(key, (n,), jnp.float32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(normal_from_bits(jnp.asarray(words), jnp.float32)))
    # float64: one 64-bit word per block, high half from the first output
    got64 = standard_normal(key, (n // 2,), jnp.float64)
    bits64 = (w0.astype(np.uint64) << np.uint64(32)) | w1.astype(np.uint64)
    np.testing.assert_array_equal(np.asarray(got64), np.asarray(normal_from_bits(jnp.asarray(bits64), jnp.float64)))


@pytest.mark.x64
@pytest.mark.parametrize("dtype, uint", [(jnp.float32, jnp.uint32), (jnp.float64, jnp.uint64)])
def test_normal_from_bits_is_jax_random_normal_map(dtype, uint):
    # jax.random.normal(key) == its map applied to jax.random.bits(key): our map is that map
    key = jax.random.key(11)
    want = jax.random.normal(key, (64, 33), dtype)
    got = normal_from_bits(jax.random.bits(key, (64, 33), uint), dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.x64
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_standard_normal_law(dtype):
    z = np.asarray(standard_normal(jax.random.key(3), (400, 501), dtype))
    assert z.dtype == dtype and z.shape == (400, 501)
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-3
    assert abs(np.corrcoef(z[:, :-1].ravel(), z[:, 1:].ravel())[0, 1]) < 0.01  # neighbours uncorrelated
    assert np.abs(z).max() <= normal_bound(np.dtype(dtype).name)
    other = np.asarray(standard_normal(jax.random.key(4), (400, 501), dtype))
    assert abs(np.corrcoef(z.ravel(), other.ravel())[0, 1]) < 0.01  # keys give unrelated streams


def test_standard_normal_float64_needs_x64():
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            standard_normal(jax.random.key(0), (3,), np.float64)
    finally:
        jax.config.update("jax_enable_x64", True)


def test_standard_normal_other_prng_falls_back_to_jax():
    key = jax.random.key(0, impl="rbg")
    np.testing.assert_array_equal(np.asarray(standard_normal(key, (5, 3), jnp.float32)),
                                  np.asarray(jax.random.normal(key, (5, 3), jnp.float32)))


@pytest.mark.x64
@pytest.mark.parametrize("shape, dtype, n_parts", [((1000, 128), jnp.float32, 2), ((6, 5), jnp.float32, 2),
                                                   ((7, 4), jnp.float32, 1), ((8, 3), jnp.float64, 1)])
def test_standard_normal_pieces_are_the_draws_in_pieces(shape, dtype, n_parts):
    """The pieces are the whole draws bit for bit: per part of the rows, its first column and its
    others. float32 with an even first axis hashes each block once, for two pieces of two halves
    (its jaxpr: two hashes on counters of half the draws' size together, and no concatenation)."""
    key = jax.random.key(21)
    pieces = standard_normal_pieces(key, shape, dtype)
    assert len(pieces) == n_parts
    got = np.concatenate([np.concatenate([np.asarray(a), np.asarray(b)], axis=1) for a, b in pieces])
    np.testing.assert_array_equal(got, np.asarray(standard_normal(key, shape, dtype)))
    if n_parts == 2:
        jaxpr = jax.make_jaxpr(lambda k: standard_normal_pieces(k, shape, dtype))(key).jaxpr
        hashes = [e for e in jaxpr.eqns if e.primitive.name == "threefry2x32"]
        assert len(hashes) == 2 and sum(math.prod(e.invars[2].aval.shape) for e in hashes) == math.prod(shape) // 2
        assert not [e for e in jaxpr.eqns if e.primitive.name == "concatenate"]


def test_standard_normal_pieces_without_halves_is_one_part_of_the_whole_draws():
    key = jax.random.key(2)
    ((first, rest),) = standard_normal_pieces(key, (6, 5), jnp.float32, halves=False)
    np.testing.assert_array_equal(np.concatenate([np.asarray(first), np.asarray(rest)], axis=1),
                                  np.asarray(standard_normal(key, (6, 5), jnp.float32)))


def test_standard_normal_pieces_other_prng_is_one_part():
    key = jax.random.key(0, impl="rbg")
    ((first, rest),) = standard_normal_pieces(key, (6, 3), jnp.float32)
    np.testing.assert_array_equal(np.concatenate([np.asarray(first), np.asarray(rest)], axis=1),
                                  np.asarray(jax.random.normal(key, (6, 3), jnp.float32)))


def test_independent_maps_from_draws_in_pieces_are_the_whole_draws_maps(monkeypatch):
    """A GPU draws each cell's normals in pieces (``_engine.draws_in_pieces``): the same draws, so
    on this CPU the maps are the whole draws' to float32 rounding (XLA's programs for the pieces
    may round a reduction otherwise), for a log-sum-exp table, a max table and ArcCon's."""
    from gradlab.simulate import _engine

    p = Protocol(grid=(3, 4), batches=30, batch_size=9, mode="independent")
    whole = {loss: gd_map(loss, p) for loss in ("infonce", "mpt", "arccon")}
    monkeypatch.setitem(_engine._DRAW_PIECES, gradlab.backend.current(), True)
    assert _engine.draws_in_pieces()
    for loss, want in whole.items():
        got = gd_map(loss, p)
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(got.stderr, want.stderr, rtol=1e-5, atol=1e-12)
        assert not np.array_equal(got.mean, gd_map(loss, p.replace(seed=1)).mean)  # the seed's draws, not any


# --- the independent-mode cell kernel, float32, against XLA's cosine -------------------------
def _loop_gd(loss, protocol):
    loss = gradlab.get_loss(loss)
    out = np.zeros(protocol.grid_shape)
    for i, mp in enumerate(protocol.mu_pos):
        for j, mn in enumerate(protocol.mu_neg):
            tp, tn = sample_angles(protocol, mp, mn, cell=i * len(protocol.mu_neg) + j)
            out[i, j] = np.mean(np.asarray(loss.components_from_angles(tp, tn).gd, np.float64))
    return out


# fast cos, then jnp.cos (angles past COS_F32_LIMIT: μ ranges lie in [0, π], so a huge σ_neg)
@pytest.mark.parametrize("mu_neg_range, sigma_neg", [((0.2, 3.1), 0.1), ((2.9, 3.1), 1000.0)])
def test_independent_float32_gd_matches_loop(mu_neg_range, sigma_neg):
    p = Protocol(grid=(3, 4), batches=50, batch_size=16, mode="independent", mu_neg_range=mu_neg_range,
                 sigma_neg=sigma_neg)
    bound = max(mu_neg_range) + p.sigma_neg * normal_bound("float32")
    assert cos_for(np.float32, bound) is (cos_f32 if bound < COS_F32_LIMIT else jnp.cos)
    for name in ("infonce", "arccon"):
        got = gd_map(name, p).mean
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, _loop_gd(name, p), atol=2e-5)


def _lse_reference(x: np.ndarray) -> np.ndarray:
    """log Σ exp(x) over the last axis in float64, shifted by the max (−inf for an all −inf row)."""
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)))[..., 0]


@pytest.mark.parametrize("scale", [1e-3, 1.0, 20.0, 1e4])
def test_the_one_pass_logsumexp_is_the_float64_one_to_a_float32_ulp(scale):
    """The table's log-sum-exp of c/τ, c in [−1, 1]: τ from 1000 down to 1e-4 (scale 1/τ), in one
    pass over the negatives (a running max and a rescaled sum), against float64."""
    x = np.random.default_rng(int(scale * 10)).uniform(-1, 1, size=(64, 127)) * scale
    got = np.asarray(logsumexp_one_pass(jnp.asarray(x, jnp.float32)), np.float64)
    want = _lse_reference(np.asarray(x, np.float32))
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(np.float32).eps, atol=4 * np.finfo(np.float32).eps)


def test_the_one_pass_logsumexp_at_its_edges():
    rows = np.array([[-np.inf, -np.inf, -np.inf],  # nothing: −inf
                     [-np.inf, 2.0, -np.inf],  # one term: itself
                     [3e38, 3e38, -3e38],  # near float32's largest: no overflow
                     [-1e4, -1e4 - 0.5, -1e4 + 0.25]], np.float32)  # far below exp's underflow
    got = np.asarray(logsumexp_one_pass(jnp.asarray(rows)), np.float64)
    want = _lse_reference(rows)
    assert got[0] == -np.inf and got[1] == 2.0
    np.testing.assert_allclose(got[2:], want[2:], rtol=4 * np.finfo(np.float32).eps)
    assert logsumexp_one_pass(jnp.zeros((2, 1))).tolist() == [0.0, 0.0]
