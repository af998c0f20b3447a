"""The contract every registered loss keeps, whatever its family.

Runs over ``gradlab.list_losses()`` at collection time, so a loss added to the
registry is held to it automatically: exact paradigm identity (where declared exact),
finite values and gradients at the sphere's singular points in float32 and float64,
parameter validation, angle form consistency.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gradlab
from gradlab.losses import get_spec
from tests._batches import batch

ALL = gradlab.list_losses()
# the paradigm identity is checked to 1e-9 and the hyper-parameter gradients against finite
# differences: float64 references (float32 inputs stay float32 under x64)
pytestmark = pytest.mark.x64


def _batch(n=6, d=10, seed=0, dtype=np.float64):
    return batch(n, d, seed, dtype=dtype)


def _singular_batches(dtype):
    h, hp = _batch(dtype=dtype)
    identical = (h, h.copy())
    antipodal = (h, -h)
    dup = hp.copy()
    dup[1] = h[0]  # a negative identical to anchor 0
    dup[2] = -h[0]  # and one antipodal to it
    return {"identical_views": identical, "antipodal_views": antipodal, "negative_on_anchor": (h, dup)}


def test_every_family_is_populated():
    for family in gradlab.losses.FAMILIES:
        assert gradlab.list_losses(family), f"no loss registered in family {family!r}"


@pytest.mark.parametrize("name", ALL)
def test_declared_exact_losses_satisfy_the_paradigm(name):
    spec = get_spec(name)
    loss = gradlab.get_loss(name)
    h, hp = _batch(n=6, d=12, seed=1)
    g_auto = np.asarray(loss.anchor_gradient(h, hp))
    g_par = np.asarray(loss.paradigm_gradient(h, hp))
    err = np.abs(g_par - g_auto).max() / max(np.abs(g_auto).max(), 1e-300)
    if spec.exact:
        assert err < 1e-9, f"{name}: paradigm identity off by {err:.3g} (relative)"
    else:
        assert err > 1e-6, f"{name} is declared approximate but its decomposition is exact ({err:.3g})"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ALL)
def test_values_gradients_components_finite_at_singular_points(name, dtype):
    loss = gradlab.get_loss(name)
    for case, (h, hp) in _singular_batches(dtype).items():
        value = loss(h, hp)
        assert value.dtype == dtype, f"{name}/{case}: dtype {value.dtype}"
        assert np.isfinite(float(value)), f"{name}/{case}: value not finite"
        g = jax.grad(lambda a, b: loss(a, b), argnums=(0, 1))(h, hp)
        for k, gk in enumerate(g):
            assert np.all(np.isfinite(np.asarray(gk))), f"{name}/{case}: gradient {k} not finite"
        c = loss.components(h, hp)
        for field in ("gd", "weight", "ratio"):
            assert np.all(np.isfinite(np.asarray(getattr(c, field)))), f"{name}/{case}: {field} not finite"
        assert np.all(np.isfinite(np.asarray(loss.paradigm_gradient(h, hp))))


@pytest.mark.parametrize("name", ALL)
def test_component_shapes(name):
    loss = gradlab.get_loss(name)
    n, d = 5, 9
    h, hp = _batch(n, d)
    c = loss.components(h, hp)
    assert c.gd.shape == (n,)
    assert c.weight.shape == (n, n)
    assert np.all(np.diag(np.asarray(c.weight)) == 0)
    if c.ratio_is_matrix:
        assert c.ratio.shape == (n, d) and c.ratio_matrix().shape == (n, d, d)
    else:
        np.broadcast_shapes(c.ratio.shape, (n, n))
    assert c.negatives in ("h", "h_prime")


@pytest.mark.parametrize("name", [n for n in ALL if get_spec(n).kind == "cosine"])
def test_angle_form_shapes(name):
    c = gradlab.get_loss(name).components_from_angles(np.full((3,), 0.4), np.full((3, 7), 1.2))
    assert c.gd.shape == (3,) and c.weight.shape == (3, 7)
    np.broadcast_shapes(c.ratio.shape, (3, 7))


@pytest.mark.parametrize("name", [n for n in ALL if get_spec(n).kind != "cosine"])
def test_no_angle_form_is_a_clear_error(name):
    with pytest.raises(NotImplementedError, match="no angle form"):
        gradlab.get_loss(name).components_from_angles(np.zeros(2), np.ones((2, 3)))


@pytest.mark.parametrize("name", ALL)
def test_bad_parameters_raise_value_error_naming_choices(name):
    spec = get_spec(name)
    with pytest.raises(ValueError, match="unknown parameter"):
        gradlab.get_loss(name, not_a_parameter=1.0)
    for key, rule in spec.rules.items():
        bad = {"positive": 0.0, "nonnegative": -0.1, "unit": 1.5}.get(rule)
        if bad is not None:
            with pytest.raises(ValueError, match=key):
                gradlab.get_loss(name, **{key: bad})
        with pytest.raises(ValueError, match=key):
            gradlab.get_loss(name, **{key: float("nan")})


def test_unknown_loss_names_the_valid_choices():
    with pytest.raises(ValueError, match="infonce"):
        gradlab.get_loss("no-such-loss")


@pytest.mark.parametrize(
    "h, hp, exc, match",
    [
        (np.ones((4, 3)), np.ones((4, 5)), ValueError, r"same shape.*\(4, 3\).*\(4, 5\)"),
        (np.ones((1, 3)), np.ones((1, 3)), ValueError, "N >= 2"),
        (np.ones(3), np.ones(3), ValueError, "rank 1"),
        (np.array([[1.0, np.nan], [1.0, 2.0]]), np.ones((2, 2)), ValueError, "non-finite"),
        (np.array([[0.0, 0.0], [1.0, 2.0]]), np.ones((2, 2)), ValueError, "zero vector at row 0"),
        (np.ones((2, 2), dtype=complex), np.ones((2, 2)), TypeError, "dtype complex"),
    ],
)
def test_bad_input_is_a_clear_error(h, hp, exc, match):
    loss = gradlab.get_loss("infonce")
    with pytest.raises(exc, match=match):
        loss(h, hp)
    with pytest.raises(exc, match=match):
        loss.components(h, hp)


def test_bad_angle_input():
    loss = gradlab.get_loss("infonce")
    with pytest.raises(ValueError, match="theta_pos"):
        loss.components_from_angles(np.zeros(3), np.zeros((4, 5)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", [n for n in ALL if get_spec(n).exact])
def test_paradigm_matches_autodiff_at_singular_points(name, dtype):
    """Not only finite: at identical / antipodal views the paradigm still gives autodiff's gradient.

    The pull direction P_i h_i' vanishes there, so R must stay moderate (a ratio of
    1e37 times a rounding-level P_i h_i' is garbage). Tolerance: 1e-3 of the push scale.
    """
    loss = gradlab.get_loss(name)
    for case, (h, hp) in _singular_batches(dtype).items():
        g_auto = np.asarray(loss.anchor_gradient(h, hp), dtype=np.float64)
        g_par = np.asarray(loss.paradigm_gradient(h, hp), dtype=np.float64)
        w = np.abs(np.asarray(loss.components(h, hp).weight, dtype=np.float64)).sum(axis=1).max()
        scale = max(1.0, w, np.abs(g_auto).max())
        assert np.abs(g_par - g_auto).max() <= 1e-3 * scale, f"{name}/{case}"


# --- hyper-parameters under jax.grad / vmap (a learnable temperature, a sweep) -------------
_PARAM_CASES = [(n, k) for n in ALL for k in get_spec(n).defaults]


@pytest.mark.parametrize("name,key", _PARAM_CASES)
def test_hyperparameter_gradient_matches_finite_differences(name, key):
    # the modified family is defined by its gradient in h (stop_gradient inside the value),
    # so its value's derivative in a hyper-parameter is not an objective's: excluded
    if get_spec(name).family == "modified":
        pytest.skip("gradient-defined surrogate: d value / d param is not meaningful")
    h, hp = _batch(n=6, d=5, seed=3)
    v0 = float(get_spec(name).defaults[key])

    def f(v):
        return gradlab.get_loss(name, **{key: v})(h, hp)

    grad = float(jax.grad(f)(np.float64(v0)))
    eps = 1e-6 * max(abs(v0), 1e-3)
    fd = (float(f(v0 + eps)) - float(f(v0 - eps))) / (2 * eps)
    assert grad == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_hyperparameters_vmap_and_arrays():
    h, hp = _batch(n=6, d=5, seed=4)
    taus = np.array([0.05, 0.1, 0.5])
    swept = jax.vmap(lambda t: gradlab.get_loss("infonce", tau=t)(h, hp))(taus)
    want = [float(gradlab.get_loss("infonce", tau=float(t))(h, hp)) for t in taus]
    np.testing.assert_allclose(np.asarray(swept), want, rtol=1e-12)
    assert gradlab.get_loss("infonce", tau=np.float32(0.25)).params["tau"] == 0.25  # 0-d counts as its number
    assert gradlab.get_loss("infonce", tau=jax.numpy.asarray(0.5)).params["tau"] == 0.5
    with pytest.raises(ValueError, match="must be > 0"):
        gradlab.get_loss("infonce", tau=jax.numpy.asarray(-1.0))
    ints = jax.vmap(lambda t: gradlab.get_loss("mpt", m=t)(h, hp))(np.array([0, 1]))  # an int sweep
    np.testing.assert_allclose(np.asarray(ints), [float(gradlab.get_loss("mpt", m=m)(h, hp)) for m in (0.0, 1.0)])
    with pytest.raises(ValueError, match="too large for a float"):
        gradlab.get_loss("infonce", tau=10**400)
    with pytest.raises(ValueError, match="real scalar"):
        jax.jit(lambda t: gradlab.get_loss("infonce", tau=t)(h, hp))(np.ones(3))
    seen = []
    jax.jit(lambda t: seen.append(repr(gradlab.get_loss("infonce", tau=t))) or t)(0.1)
    assert seen == ["Loss('infonce', tau=<traced>)"]


def test_angle_form_rejects_non_finite_angles():
    loss = gradlab.get_loss("arccon")
    with pytest.raises(ValueError, match=r"theta_pos has a non-finite entry at index \(1,\)"):
        loss.components_from_angles(np.array([0.3, np.nan]), np.full((2, 3), 1.0))
    with pytest.raises(ValueError, match="theta_neg has a non-finite entry"):
        loss.components_from_angles(np.array([0.3, 0.4]), np.array([[1.0, np.inf, 1.0], [1.0, 1.0, 1.0]]))
    # traced angles are not checked (no values yet) and stay jit-friendly
    assert jax.jit(loss.components_from_angles)(np.array([0.3]), np.full((1, 3), 1.0)).gd.shape == (1,)
