"""The losses package as values and doors: Loss as a pytree, explicit spec kinds, the
optax-style functions, the one triplet gate and the one uniformity.

Witnesses: NumPy float64 loop references written from the papers (Li et al. 2024
Table 1; Nie et al. 2023 Table 2 and App. C), the closed form of dL/dτ for InfoNCE, and
``jax.grad`` for the paradigm identity of a user-built spec.
"""

from __future__ import annotations

import doctest
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradlab
import gradlab.losses as L
from gradlab.losses import (
    TRIPLET_METRICS,
    Loss,
    LossSpec,
    _functional,  # private modules on purpose: their doctests (and function_name) run here
    _loss,
    _ops,
    _registry,
    get_loss,
    get_spec,
    list_losses,
    threshold_angle,
    triplet_gate,
)
from tests._batches import batch


def _np_infonce(h, hp, tau):
    """mean_i [log Σ_k e^{C_ik/τ} − C_ii/τ], C = h hp^T on unit rows (loop)."""
    h = h / np.linalg.norm(h, axis=1, keepdims=True)
    hp = hp / np.linalg.norm(hp, axis=1, keepdims=True)
    out = []
    for i in range(len(h)):
        c = [float(h[i] @ hp[k]) for k in range(len(h))]
        top = max(x / tau for x in c)
        out.append(top + math.log(sum(math.exp(x / tau - top) for x in c)) - c[i] / tau)
    return float(np.mean(out))


def _np_infonce_dtau(h, hp, tau):
    """d/dτ of the mean InfoNCE: mean_i (c_ii − Σ_k q_ik c_ik) / τ², q = softmax_k(c_ik/τ)."""
    h = h / np.linalg.norm(h, axis=1, keepdims=True)
    hp = hp / np.linalg.norm(hp, axis=1, keepdims=True)
    c = h @ hp.T
    q = np.exp(c / tau - (c / tau).max(axis=1, keepdims=True))
    q /= q.sum(axis=1, keepdims=True)
    return float(np.mean((np.diag(c) - (q * c).sum(axis=1)) / tau**2))


# --- Loss is a pytree ----------------------------------------------------------------
@pytest.mark.x64
def test_loss_is_a_jit_argument_and_a_new_tau_does_not_recompile():
    h, hp = batch(6, 8, 0)
    traces = []

    def f(loss, a, b):
        traces.append(1)
        return loss(a, b)

    jitted = jax.jit(f)
    for tau in (0.05, 0.1, 0.3):
        got = float(jitted(get_loss("infonce", tau=tau), h, hp))
        assert got == pytest.approx(_np_infonce(h, hp, tau), rel=1e-10)
    assert len(traces) == 1 and jitted._cache_size() == 1


def test_the_methods_compile_once_per_spec_not_per_parameter_value():
    h, hp = batch(5, 6, 9)
    get_loss("arccon", tau=0.1, u=0.2).components(h, hp)
    before = _loss._run._cache_size()
    for tau, u in ((0.2, 0.1), (0.07, -0.3)):
        get_loss("arccon", tau=tau, u=u).components(h, hp)
    assert _loss._run._cache_size() == before


@pytest.mark.x64
def test_vmap_over_a_batch_of_tau():
    h, hp = batch(5, 7, 1)
    taus = np.array([0.03, 0.1, 0.5])
    loss = get_loss("infonce")
    got = jax.vmap(lambda t: loss.replace(tau=t)(h, hp))(taus)
    batched = jax.tree.map(lambda _: jnp.asarray(taus), loss)  # a Loss whose leaf is (3,)
    got2 = jax.vmap(lambda lo: lo(h, hp))(batched)
    want = [_np_infonce(h, hp, t) for t in taus]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(got2), want, rtol=1e-10)


@pytest.mark.x64
def test_grad_with_respect_to_the_loss_is_d_dtau():
    h, hp = batch(6, 9, 2)
    g = jax.grad(lambda lo: lo(h, hp))(get_loss("infonce", tau=0.2))
    assert isinstance(g, Loss) and list(g.params) == ["tau"]
    assert float(g.params["tau"]) == pytest.approx(_np_infonce_dtau(h, hp, 0.2), rel=1e-9)


def test_pytree_leaves_are_the_parameters_and_the_spec_is_static():
    loss = get_loss("margin_infonce", m1=0.3, symmetric=True)
    leaves, treedef = jax.tree.flatten(loss)
    assert leaves == [0.25, 1.0, 0.3, 0.4]
    back = jax.tree.unflatten(treedef, leaves)
    assert back == loss and back.spec is loss.spec and back.symmetric
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(loss)[0]]
    assert paths == ["['tau']", "['beta']", "['m1']", "['m2']"]


def test_eq_and_hash_for_concrete_and_traced_parameters():
    a, b = get_loss("infonce", tau=0.1), get_loss("infonce", tau=0.1)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != get_loss("infonce", tau=0.2) and a != get_loss("dcl", tau=0.1)
    assert a != get_loss("infonce", tau=0.1, symmetric=True)
    assert get_loss("infonce", tau=np.float32(0.5)) == get_loss("infonce", tau=0.5)

    def f(lo):
        assert lo == lo and isinstance(hash(lo), int) and "<traced>" in repr(lo)
        assert lo != a  # a traced value is not a known number
        return lo.params["tau"]

    jax.jit(f)(a)


@pytest.mark.x64
def test_symmetric_and_components_share_one_program_per_spec():
    h, hp = batch(5, 6, 3)
    sym = get_loss("dcl", tau=0.1, symmetric=True)
    one = get_loss("dcl", tau=0.1)
    assert float(sym(h, hp)) == pytest.approx(0.5 * (float(one(h, hp)) + float(one(hp, h))), rel=1e-12)
    np.testing.assert_array_equal(np.asarray(sym.components(h, hp).weight), np.asarray(one.components(h, hp).weight))


# --- explicit kinds ---------------------------------------------------------------------
def test_every_registered_spec_has_one_kind_and_only_its_functions():
    kinds = {n: get_spec(n).kind for n in list_losses()}
    assert set(kinds.values()) == set(L.KINDS)
    for name, kind in kinds.items():
        s = get_spec(name)
        given = {f for f in ("value", "kernel", "per_anchor", "batch", "components", "objective") if getattr(s, f)}
        allowed = {"cosine": {"value", "kernel"}, "per_anchor": {"per_anchor", "components", "objective"},
                   "batch": {"batch", "components"}}[kind]
        assert given <= allowed, name
    assert kinds["infonce"] == "cosine" and kinds["baseline"] == "cosine"
    assert kinds["alignment"] == "per_anchor" and kinds["uniformity"] == "batch"
    for gone in ("cosine_family", "has_angle_form", "batch_level"):
        assert not hasattr(get_spec("infonce"), gone)


def test_a_spec_with_the_wrong_functions_is_a_clear_error():
    dcl = get_spec("dcl")
    with pytest.raises(ValueError, match="'cosine' spec takes exactly value and kernel"):
        LossSpec(name="x", title="x", family="custom", kind="cosine", defaults={}, rules={},
                 value=dcl.value, kernel=dcl.kernel, batch=lambda h, hp: 0.0)
    with pytest.raises(ValueError, match="unknown kind"):
        LossSpec(name="x", title="x", family="custom", kind="angles", defaults={}, rules={})
    with pytest.raises(ValueError, match="exactly one of per_anchor= and batch="):
        LossSpec.on_embeddings("x", lambda h, hp: None, defaults={}, rules={})
    with pytest.raises(ValueError, match="unknown family"):
        _registry.register(LossSpec.from_cosines("x", dcl.value, dcl.kernel, defaults={"tau": 1.0},
                                                 rules={"tau": "positive"}))


@pytest.mark.x64
def test_a_user_cosine_spec_is_a_full_loss_without_registration():
    def value(c_pos, c_neg, valid, *, s):  # DCL with temperature 1/s, written by a user
        return -s * c_pos + _ops.masked_logsumexp(s * c_neg, valid)

    def kernel(c_pos, c_neg, valid, *, s):
        return jnp.ones_like(c_pos), s * _ops.masked_softmax(s * c_neg, valid), jnp.ones_like(c_pos)[..., None]

    spec = LossSpec.from_cosines("my_dcl", value, kernel, defaults={"s": 5.0}, rules={"s": "positive"})
    loss = Loss.from_spec(spec, s=4.0)
    assert "my_dcl" not in list_losses()
    h, hp = batch(6, 10, 4)
    g_auto, g_par = np.asarray(loss.anchor_gradient(h, hp)), np.asarray(loss.paradigm_gradient(h, hp))
    np.testing.assert_allclose(g_par, g_auto, atol=1e-12 * np.abs(g_auto).max())
    ref = get_loss("dcl", tau=0.25)
    assert float(loss(h, hp)) == pytest.approx(float(ref(h, hp)), rel=1e-12)
    c = loss.components_from_angles(np.array([0.3]), np.array([[1.0, 2.0]]))
    assert c.weight.shape == (1, 2)
    with pytest.raises(ValueError, match="'s' must be > 0"):
        Loss.from_spec(spec, s=0.0)


# --- optax-style functions ---------------------------------------------------------------
@pytest.mark.parametrize("name", list_losses())
def test_one_function_per_loss_with_the_registry_signature(name):
    ident = _functional.function_name(name)
    fn = getattr(L, ident)
    assert ident in L.__all__ and ident in dir(L) and fn.__name__ == ident
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params[:2]] == ["h", "h_prime"]
    kw = {p.name: p.default for p in params[2:]}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
    assert kw == {**get_spec(name).defaults, "symmetric": False}
    assert get_spec(name).title in fn.__doc__ and get_spec(name).reference in fn.__doc__


@pytest.mark.x64
def test_function_names_and_values():
    assert L.dcl_plus is L.dcl_plus and _functional.function_name("dcl+") == "dcl_plus"
    h, hp = batch(6, 8, 5)
    assert float(L.infonce(h, hp, tau=0.1)) == pytest.approx(_np_infonce(h, hp, 0.1), rel=1e-10)
    assert float(L.infonce(h, hp)) == pytest.approx(_np_infonce(h, hp, 0.05), rel=1e-10)
    sym = 0.5 * (_np_infonce(h, hp, 0.1) + _np_infonce(hp, h, 0.1))
    assert float(L.infonce(h, hp, tau=0.1, symmetric=True)) == pytest.approx(sym, rel=1e-10)
    with pytest.raises(TypeError):
        L.infonce(h, hp, 0.1)  # keyword-only
    with pytest.raises(TypeError):
        L.infonce(h, hp, temperature=0.1)
    with pytest.raises(ValueError, match="'tau' must be > 0"):
        L.infonce(h, hp, tau=-1.0)


def test_doctests_of_the_losses_package():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = []
    for mod in (_ops, _registry, _loss, _functional):
        tests += finder.find(mod)
    for ident in ("infonce", "uniformity"):  # the generated docstrings share one template
        tests += finder.find(getattr(L, ident), ident, globs={})
    assert sum(len(t.examples) for t in tests) >= 10
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


# --- the triplet gate, one home ------------------------------------------------------------
def _gate_loop(name, theta_pos, theta_neg, m):
    """Li et al. 2024 Table 1 / Nie et al. 2023: the hinge is active (GD = 1) iff ..."""
    if name == "mpt":
        return math.cos(theta_pos) - math.cos(theta_neg) < m
    if name == "met":
        chord = lambda t: math.sqrt(2.0 - 2.0 * math.cos(t))  # noqa: E731  ‖a − b‖ on the sphere
        return chord(theta_neg) - chord(theta_pos) < m
    return theta_neg - theta_pos < m


@pytest.mark.parametrize("name", ["mpt", "met", "mat"])
def test_triplet_gate_equals_a_loop_reference_and_its_inverse(name):
    rng = np.random.default_rng(7)
    metric, m = TRIPLET_METRICS[name], {"mpt": 0.23, "met": 0.45, "mat": 0.15 * math.pi}[name]
    tp, tn = rng.uniform(0, math.pi, 400), rng.uniform(0, math.pi, 400)
    a = threshold_angle(name, tp, m)
    gate_angle = np.asarray(triplet_gate(metric.of_angle(tn, np), metric.of_angle(tp, np), m))
    gate_cos = np.asarray(triplet_gate(metric.of_cos(np.cos(tn), np), metric.of_cos(np.cos(tp), np), m))
    for k in range(tp.size):
        want = _gate_loop(name, tp[k], tn[k], m)
        if abs(tn[k] - a[k]) < 1e-9:
            continue  # on the boundary to rounding: either answer is right
        assert bool(gate_angle[k]) == want and bool(gate_cos[k]) == want
        assert (tn[k] < a[k]) == want  # the threshold angle is the gate's inverse
    # the kernels use the same gate: GD of the registered loss equals the loop reference
    loss = get_loss(name, m=m)
    gd = np.asarray(loss.components_from_angles(tp, tn[:, None]).gd)
    ok = np.abs(tn - a) > 1e-9
    np.testing.assert_array_equal(gd[ok], [float(_gate_loop(name, p, q, m)) for p, q in zip(tp[ok], tn[ok], strict=True)])


@pytest.mark.x64
def test_triplet_gate_at_the_boundary_is_strict():
    # exact dyadic cases: d(hardest) − d(pos) == m closes the gate, one ulp less opens it
    d = TRIPLET_METRICS["mpt"].of_cos
    assert not bool(triplet_gate(d(0.5), d(0.75), 0.25))
    assert bool(triplet_gate(d(0.5), d(0.75), np.nextafter(0.25, 1.0)))
    assert not bool(triplet_gate(0.75, 0.5, 0.25)) and bool(triplet_gate(0.75, 0.5, np.nextafter(0.25, 1.0)))
    kern = get_spec("mpt").kernel
    valid = jnp.ones((1, 2), bool)
    c_neg = jnp.array([[0.5, -0.25]])
    assert float(kern(jnp.array([0.75]), c_neg, valid, m=0.25)[0][0]) == 0.0
    assert float(kern(jnp.array([0.75]), c_neg, valid, m=float(np.nextafter(0.25, 1.0)))[0][0]) == 1.0


def test_threshold_angle_matches_the_closed_forms():
    tp = np.linspace(0.0, math.pi, 101)
    m = 0.3
    mpt = [math.acos(math.cos(t) - m) if math.cos(t) - m >= -1 else math.inf for t in tp]
    met = [math.acos(1 - (2 * math.sin(t / 2) + m) ** 2 / 2) if 2 * math.sin(t / 2) + m <= 2 else math.inf for t in tp]
    mat = [t + m if t + m <= math.pi else math.inf for t in tp]
    np.testing.assert_allclose(threshold_angle("mpt", tp, m), mpt, rtol=1e-12)
    np.testing.assert_allclose(threshold_angle("met", tp, m), met, rtol=1e-7)  # arccos(1 − x) loses digits
    np.testing.assert_allclose(threshold_angle("mat", tp, m), mat, rtol=0)
    with pytest.raises(ValueError, match="no triplet metric"):
        threshold_angle("infonce", tp, m)


# --- uniformity, one home ---------------------------------------------------------------------
def _log_mean_gaussian_loop(a, b, t, pairs):
    n = len(a)
    terms = [math.exp(-t * float(np.sum((a[k] - b[j]) ** 2)))
             for k in range(n) for j in range(n) if (k < j if pairs == "k<l" else k != j)]
    return math.log(sum(terms) / len(terms))


@pytest.mark.x64
def test_uniformity_parametrizations_equal_the_loop_reference():
    import dataclasses

    # private on purpose: the three homes of one uniformity are compared
    from gradlab.losses._ineffective import mhe_uniformity, uniformity_batch
    from gradlab.monitor._monitor import make_config
    from gradlab.monitor._stats import batch_statistics_fn

    h, hp = batch(7, 5, 8)
    h = h / np.linalg.norm(h, axis=1, keepdims=True)
    hp = hp / np.linalg.norm(hp, axis=1, keepdims=True)
    for t in (0.5, 2.0, 6.0):
        want = _log_mean_gaussian_loop(h, h, t, "k<l")
        # Wang & Isola, t: the monitor's row-block form, averaged over the two views
        for blk in (2, 256):
            cfg = dataclasses.replace(make_config(losses=("infonce",), taus=(0.05,), lambdas=(0.5,), block=blk),
                                      uniform_t=t)
            both = 0.5 * (want + _log_mean_gaussian_loop(hp, hp, t, "k<l"))
            got = batch_statistics_fn(cfg)(jnp.asarray(h), jnp.asarray(hp))["uniform"]
            assert float(got) == pytest.approx(both, rel=1e-12)
        assert float(mhe_uniformity(jnp.asarray(h), 1.0 / (2.0 * t))) == pytest.approx(want, rel=1e-12)  # τ
        cross = _log_mean_gaussian_loop(h, hp, t, "k≠l")  # Nie et al. 2023 App. C
        assert float(uniformity_batch(jnp.asarray(h), jnp.asarray(hp), t=t)) == pytest.approx(cross, rel=1e-12)
    assert gradlab.losses.log_mean_gaussian is _ops.log_mean_gaussian
