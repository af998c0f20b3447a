"""Lemma 1: the bounds solve the tangent-plane quadratic; the on-sphere check against a NumPy rotation."""

import numpy as np
import pytest

from gradlab.lemma1 import lemma1_bounds, lemma1_sphere_check


@pytest.mark.x64
def test_bounds_are_the_roots_of_the_tangent_plane_condition():
    rng = np.random.default_rng(0)
    tp, tn, a = rng.uniform(0.1, 1.5, 500), rng.uniform(0.1, 3.0, 500), rng.uniform(0, np.pi, 500)
    lam = 0.3
    low, high, ok = (np.asarray(x) for x in lemma1_bounds(tp, tn, a, lam))
    s, t = np.sin(tp), np.sin(tn)

    def gap(r):  # |λ(r p − n) − p|² − |p|² on the tangent plane (p = s e2, n = t(cos α e2 + sin α e3))
        s_, t_, a_ = s[ok], t[ok], a[ok]
        return (lam * r * s_ - lam * t_ * np.cos(a_) - s_) ** 2 + (lam * t_ * np.sin(a_)) ** 2 - s_**2

    assert ok.any() and (~ok).any()
    np.testing.assert_allclose(gap(low[ok]), 0, atol=1e-9)
    np.testing.assert_allclose(gap(high[ok]), 0, atol=1e-9)
    assert np.all(gap((low[ok] + high[ok]) / 2) <= 1e-12)
    assert np.all(np.isnan(low[~ok]))


def _sphere_numpy(tp, tn, a, lam, r):
    h = np.array([1.0, 0, 0])
    hp = np.array([np.cos(tp), np.sin(tp), 0])
    hn = np.array([np.cos(tn), np.sin(tn) * np.cos(a), np.sin(tn) * np.sin(a)])
    g = r * hp - hn
    g = g - g.dot(h) * h
    x = h + lam * g
    x /= np.linalg.norm(x)
    return np.arccos(np.clip(x.dot(hp), -1, 1)) - tp


@pytest.mark.x64
def test_sphere_check_against_numpy_and_small_steps():
    rng = np.random.default_rng(1)
    n = 300
    tp, tn, a = rng.uniform(0.1, 1.5, n), rng.uniform(0.1, 3.0, n), rng.uniform(0, np.pi, n)
    r = rng.uniform(0.5, 3, n)
    chk = lemma1_sphere_check(tp, tn, a, 0.5, r)
    want = np.array([_sphere_numpy(*args, 0.5, rr) for *args, rr in zip(tp, tn, a, r, strict=True)])
    np.testing.assert_allclose(np.asarray(chk.delta), want, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(chk.true_closer), want <= 0)
    np.testing.assert_array_equal(np.asarray(chk.disagree), np.asarray(chk.approx_closer) != (want <= 0))
    # the approximation becomes exact as λ → 0 (away from the boundary r = r_low)
    small = lemma1_sphere_check(tp, tn, a, 1e-4, r)
    low, _, _ = lemma1_bounds(tp, tn, a, 1e-4)
    margin = np.abs(r - np.asarray(low)) > 1e-2
    assert not np.any(np.asarray(small.disagree)[margin])
    # and it does disagree for big steps
    big = lemma1_sphere_check(tp, tn, a, 1.0, r)
    assert np.asarray(big.disagree).mean() > 0.05


@pytest.mark.x64
def test_sphere_check_closed_form_case():
    # α = 0, θ_pos = π/6, θ_neg = π/3, r = 1, λ = 0.1: low = t/s = √3 > 1: the lemma says "farther"
    chk = lemma1_sphere_check(np.pi / 6, np.pi / 3, 0.0, 0.1, 1.0)
    assert not bool(chk.approx_closer) and not bool(chk.true_closer)
    assert float(chk.delta) == pytest.approx(_sphere_numpy(np.pi / 6, np.pi / 3, 0.0, 0.1, 1.0))


def _bounds_float64(tp, tn, a, lam):
    """The lemma's roots as written, 1/λ + x ∓ √(1/λ² − y), in float64 from the same float32 inputs."""
    tp, tn, a, lam = (np.asarray(v, np.float64) for v in (tp, tn, a, lam))
    s, t = np.abs(np.sin(tp)), np.abs(np.sin(tn))
    b, x, y = 1 / lam, t * np.cos(a) / s, (t * np.sin(a) / s) ** 2
    disc = b * b - y
    root = np.sqrt(np.maximum(disc, 0))
    return b + x - root, b + x + root, disc >= 0, np.abs(x) + y / (b + root), b + np.abs(x) + root, disc / b**2


@pytest.mark.parametrize("lam", [0.01, 0.1, 0.5, 1.0])
def test_bounds_float32_within_a_few_ulp_of_a_float64_reference(lam):
    """No cancellation in float32 when 1/λ is large.

    Errors are in ulp (float32) of the terms added: |x| + y / (1/λ + √D) for r_low and
    1/λ + |x| + √D for r_high (x = t cos α / s, y = t² sin²α / s², D = 1/λ² − y). Excluded:
    the band D < 0.1/λ² next to the edge of feasibility, where √D amplifies the float32
    rounding of sin θ and sin α by up to y / (2√D (1/λ + √D)) (> 1 only inside the band).
    """
    rng = np.random.default_rng(7)
    n = 20_000
    tp = rng.uniform(0.05, np.pi / 2, n).astype(np.float32)
    tn = rng.uniform(0.05, np.pi - 0.05, n).astype(np.float32)
    a = rng.uniform(0, np.pi, n).astype(np.float32)
    lam32 = np.float32(lam)
    low, high, ok = (np.asarray(v) for v in lemma1_bounds(tp, tn, a, lam32))
    assert low.dtype == np.float32
    lo64, hi64, ok64, scale_lo, scale_hi, rel_disc = _bounds_float64(tp, tn, a, lam32)
    np.testing.assert_array_equal(ok, ok64)
    away = ok & (rel_disc > 0.1)
    assert away.mean() > 0.6
    ulp = lambda v: np.spacing(v.astype(np.float32)).astype(np.float64)  # noqa: E731
    err_lo = np.abs(low - lo64)[away] / ulp(scale_lo[away])
    err_hi = np.abs(high - hi64)[away] / ulp(scale_hi[away])
    assert err_lo.max() <= 8 and err_hi.max() <= 8, (err_lo.max(), err_hi.max())
    # the witness can fail: the formula as written loses ~10⁴ ulp at λ = 0.1
    if lam <= 0.1:
        s, t = np.abs(np.sin(tp)), np.abs(np.sin(tn))
        naive = 1 / lam32 + t * np.cos(a) / s - np.sqrt(np.maximum(s**2 - (lam32 * t * np.sin(a)) ** 2, 0)) / (lam32 * s)
        assert (np.abs(naive - lo64)[away] / ulp(scale_lo[away])).max() > 100


def test_bounds_float64_agree_with_the_formula_as_written():
    rng = np.random.default_rng(8)
    tp, tn, a = rng.uniform(0.05, 1.5, 2000), rng.uniform(0.05, 3.0, 2000), rng.uniform(0, np.pi, 2000)
    import jax

    with jax.enable_x64(True):
        low, high, ok = (np.asarray(v) for v in lemma1_bounds(tp, tn, a, 0.3))
    lo64, hi64, ok64, *_ = _bounds_float64(tp, tn, a, 0.3)
    np.testing.assert_array_equal(ok, ok64)
    np.testing.assert_allclose(low[ok], lo64[ok], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(high[ok], hi64[ok], rtol=1e-12)
