"""Lemma 1: the bounds solve the tangent-plane quadratic; the on-sphere check against a NumPy rotation."""

import numpy as np
import pytest

from gradlab.lemma1 import lemma1_bounds, lemma1_sphere_check


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


def test_sphere_check_closed_form_case():
    # α = 0, θ_pos = π/6, θ_neg = π/3, r = 1, λ = 0.1: low = t/s = √3 > 1: the lemma says "farther"
    chk = lemma1_sphere_check(np.pi / 6, np.pi / 3, 0.0, 0.1, 1.0)
    assert not bool(chk.approx_closer) and not bool(chk.true_closer)
    assert float(chk.delta) == pytest.approx(_sphere_numpy(np.pi / 6, np.pi / 3, 0.0, 0.1, 1.0))
