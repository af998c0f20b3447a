"""Geometry helpers: values against closed forms, and finite gradients at the singular points."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradlab import geometry as g


def test_normalize_and_zero_rows():
    x = jnp.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(np.asarray(g.normalize(x)), [[0.6, 0.8], [0.0, 0.0]])
    grad = jax.grad(lambda x: g.normalize(x).sum())(x)
    assert np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.x64
@pytest.mark.parametrize("c", [-1.0, -0.3, 0.0, 0.7, 1.0, 1.0 + 1e-15])
def test_safe_functions_values(c):
    theta = np.arccos(np.clip(c, -1, 1))
    assert float(g.safe_arccos(c)) == pytest.approx(theta, abs=1e-15)
    assert float(g.sin_from_cos(c)) == pytest.approx(np.sin(theta), abs=1e-7)
    assert float(g.distance_from_cos(c)) == pytest.approx(np.sqrt(max(2 - 2 * c, 0)), abs=1e-7)


@pytest.mark.parametrize("fn", [g.safe_arccos, g.sin_from_cos, g.distance_from_cos])
@pytest.mark.parametrize("c", [-1.0, 1.0])
def test_gradients_finite_at_the_poles(fn, c):
    assert np.isfinite(float(jax.grad(fn)(c)))


@pytest.mark.x64
def test_sin_from_cos_is_accurate_near_one():
    theta = 1e-6
    assert float(g.sin_from_cos(np.cos(theta))) == pytest.approx(np.sin(theta), rel=1e-4)


@pytest.mark.x64
@pytest.mark.parametrize("theta", [0.3, -0.3, 2 * np.pi - 0.3, 4 * np.pi + 0.3, np.pi + 0.2])
def test_fold_angle(theta):
    assert float(g.fold_angle(theta)) == pytest.approx(np.arccos(np.cos(theta)), abs=1e-12)


@pytest.mark.x64
def test_tangent_project_is_orthogonal_and_idempotent():
    rng = np.random.default_rng(0)
    h = np.asarray(g.normalize(rng.normal(size=(4, 5))))
    v = rng.normal(size=(4, 5))
    p = np.asarray(g.tangent_project(h, v))
    np.testing.assert_allclose((p * h).sum(1), 0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(g.tangent_project(h, p)), p, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-23, 1e-30, 1e30, 1e36])
def test_normalize_survives_extreme_scales_in_float32(scale):
    x = (np.array([[3.0, 4.0], [1.0, 0.0]]) * scale).astype(np.float32)
    np.testing.assert_allclose(np.asarray(g.normalize(x)), [[0.6, 0.8], [1.0, 0.0]], rtol=1e-6)
    grad = jax.grad(lambda x: g.normalize(x)[0, 0])(x)
    # d(x0/|x|)/dx at (3, 4)·s is (16, −12)/(125 s): homogeneous of degree −1
    np.testing.assert_allclose(np.asarray(grad[0]) * scale, [16 / 125, -12 / 125], rtol=1e-5)


def test_safe_arccos_propagates_nan():
    assert np.isnan(float(g.safe_arccos(np.nan)))
