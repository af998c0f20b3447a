"""Designing a loss: autodiff components (loss_from_cosines), GD × W × R compositions (compose), resolve_loss.

Witnesses: the registered closed-form kernels (hand-derived from the papers) against autodiff
of the registered values in cosine space; jax.grad of composed losses against the paradigm;
the built-in twins of user losses in the simulator and the monitor.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradlab
from gradlab.design import parse_compose, resolve_loss
from gradlab.losses import (
    GD_BLOCKS,
    RATIO_BLOCKS,
    WEIGHT_BLOCKS,
    autodiff_kernel,
    get_loss,
    get_spec,
    list_losses,
    undefined_mask,
)

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

COSINE_LOSSES = [n for n in list_losses() if get_spec(n).kind == "cosine"]


def _angles(seed, b=64, m=7):
    rng = np.random.default_rng(seed)
    tp = rng.uniform(0.05, math.pi - 0.05, b)
    tn = rng.uniform(0.05, math.pi - 0.05, (b, m))
    return tp, tn


def _edge_angles():
    """Positives at θ = 0 and π; negatives at π (antipodal), ties, and a hardest negative at the positive's angle."""
    tp = np.array([0.0, 0.0, math.pi, 0.4, 1.0, 1.0, 2.0])
    tn = np.array([
        [0.5, 1.0, math.pi],
        [math.pi, math.pi, math.pi],
        [0.3, 1.0, 2.0],
        [0.4, 0.4, 1.5],
        [1.0, 1.0, 1.0],
        [math.pi, 2.0, 1.2],
        [2.5, math.pi, 0.1],
    ])
    return tp, tn


def _convention_free(gd, weight, ratio):
    """(GD·W_j, Σ_j W_j R_j / Σ_j W_j where GD·Σ_j W_j ≠ 0 else NaN)."""
    gw = np.asarray(gd)[..., None] * np.asarray(weight)
    w = np.asarray(weight)
    r = np.broadcast_to(np.asarray(ratio), w.shape)
    total = gw.sum(-1)
    ok = total != 0
    eff = np.where(ok, (w * r).sum(-1) / np.where(w.sum(-1) != 0, w.sum(-1), 1.0), np.nan)
    return gw, eff


def _assert_close(a, b, rel=1e-9):
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=rel, atol=rel * scale, equal_nan=True)


# --- 1. autodiff components = the closed forms, for every registered cosine-family loss --------
@pytest.mark.parametrize("name", COSINE_LOSSES)
@pytest.mark.parametrize("where", ["random", "edges"])
def test_autodiff_components_equal_closed_forms(name, where):
    spec, loss = get_spec(name), get_loss(name)
    tp, tn = _angles(7) if where == "random" else _edge_angles()
    c_pos, c_neg = jnp.cos(jnp.asarray(tp)), jnp.cos(jnp.asarray(tn))
    valid = jnp.ones(c_neg.shape, bool)
    closed = spec.kernel(c_pos, c_neg, valid, **loss.params)
    auto = autodiff_kernel(spec.value)(c_pos, c_neg, valid, **loss.params)
    gw_c, eff_c = _convention_free(*closed)
    gw_a, eff_a = _convention_free(*auto)
    # per negative: rows without a tie for the hardest negative (at a tie autodiff of max
    # splits the weight equally, the zoo gives it to the first: both are subgradients)
    cn = np.asarray(c_neg)
    untied = np.sum(cn == cn.max(-1, keepdims=True), axis=-1) == 1
    _assert_close(gw_a[untied], gw_c[untied])
    _assert_close(gw_a.sum(-1), gw_c.sum(-1))  # GD·Σ_j W_j everywhere
    # the effective ratio −(∂L/∂c_p) / Σ_j ∂L/∂c_j where the push is not lost to rounding:
    # where GD·ΣW < 1e-6, autodiff's ∂L/∂c_p = −1/τ + q_p/τ has cancelled (q_p → 1)
    ok = np.isfinite(eff_c) & (np.abs(gw_c.sum(-1)) > 1e-6)
    _assert_close(eff_a[ok], eff_c[ok])
    assert np.all(np.isfinite(np.asarray(auto[1]))) and np.all(np.isfinite(np.asarray(auto[2])))


def test_autodiff_split_convention():
    """GD = Σ_j ∂L/∂c_j, W sums to one, R = −(∂L/∂c_p)/GD: checked on InfoNCE by hand."""
    tau, cp, cn = 0.5, 0.8, np.array([0.1, 0.3])
    e = np.exp(np.concatenate([[cp], cn]) / tau)
    q = e / e.sum()
    gd, w, r = autodiff_kernel(get_spec("infonce").value)(
        jnp.array([cp]), jnp.array([cn]), jnp.ones((1, 2), bool), tau=tau)
    assert float(gd[0]) == pytest.approx((1 - q[0]) / tau, rel=1e-12)
    np.testing.assert_allclose(np.asarray(w[0]), q[1:] / q[1:].sum(), rtol=1e-12)
    assert float(r[0, 0]) == pytest.approx(1.0, rel=1e-12)


def test_gd_zero_reports_undefined_without_nan():
    """A loss of c_p alone has no push: GD = 0, W = R = 0 (undefined), flagged, never NaN; a closed gate too."""
    pull = gradlab.loss_from_cosines(lambda c_pos, c_neg: -c_pos + 0.0 * c_neg[..., 0], name="pull_only")
    c = pull.components_from_angles(jnp.array([0.3, 1.0]), jnp.array([[1.0, 2.0], [0.5, 2.5]]))
    assert np.all(np.asarray(c.gd) == 0) and np.all(np.asarray(c.weight) == 0) and np.all(np.asarray(c.ratio) == 0)
    assert np.all(np.asarray(undefined_mask(pull, jnp.cos(jnp.array([0.3])), jnp.cos(jnp.array([[1.0, 2.0]])))))
    hinge = gradlab.loss_from_cosines(lambda c_pos, c_neg, *, m: jax.nn.relu(jnp.max(c_neg, -1) - c_pos + m),
                                      name="hinge", params={"m": 0.1})
    c = hinge.components_from_angles(jnp.array([0.2, 1.0]), jnp.array([[2.0, 2.5], [0.5, 2.5]]))
    np.testing.assert_array_equal(np.asarray(c.gd), [0.0, 1.0])
    assert np.all(np.isfinite(np.asarray(c.ratio)))


def test_arccos_pole_gives_zero_not_nan():
    """jnp.arccos has an infinite derivative at θ = 0: read as 0 (the pull direction vanishes)."""
    mat = gradlab.loss_from_cosines(
        lambda c_pos, c_neg, *, m: jax.nn.relu(jnp.arccos(c_pos) - jnp.arccos(jnp.max(c_neg, -1)) + m),
        name="raw_mat", params={"m": 0.5})
    c = mat.components_from_angles(jnp.array([0.0, 0.5]), jnp.array([[0.3, 1.0], [0.8, 2.0]]))
    for x in (c.gd, c.weight, c.ratio):
        assert np.all(np.isfinite(np.asarray(x)))
    assert float(c.ratio[0, 0]) == 0.0


# --- 2. compositions: jax.grad = the paradigm --------------------------------------------------
COMBOS = list(itertools.product(GD_BLOCKS, WEIGHT_BLOCKS, RATIO_BLOCKS))


def _compose(gd, weight, ratio, **candidates):
    """The composition with those of ``candidates`` that its blocks take."""
    loss = gradlab.compose(gd=gd, weight=weight, ratio=ratio)
    return loss.replace(**{k: v for k, v in candidates.items() if k in loss.params})


def test_composed_gradient_in_cosine_space_is_the_paradigm():
    """∂L/∂c_j = GD·W_j and ∂L/∂c_p = −GD Σ_j W_j R_j for all 48 compositions (jax.grad vs the blocks)."""
    tp, tn = _angles(3, b=16, m=5)
    c_pos, c_neg = jnp.cos(jnp.asarray(tp)), jnp.cos(jnp.asarray(tn))
    valid = jnp.ones(c_neg.shape, bool)
    for gd, w, r in COMBOS:
        loss = _compose(gd, w, r, tau=0.2, m=0.4, width=0.1, r=1.3, u=0.2)
        p = loss.params
        g, wt, rt = loss.spec.kernel(c_pos, c_neg, valid, **p)
        value = functools.partial(loss.spec.value, valid=valid, **p)
        d_pos, d_neg = jax.grad(lambda a, b, f=value: jnp.sum(f(a, b)), argnums=(0, 1))(c_pos, c_neg)
        _assert_close(d_neg, np.asarray(g)[:, None] * np.asarray(wt))
        _assert_close(d_pos, -np.asarray(g) * np.sum(np.asarray(wt) * np.broadcast_to(rt, wt.shape), -1))


@pytest.mark.parametrize("blocks", [("fraction", "softmax", "arccon"), ("sigmoid", "hardest", "mat"),
                                    ("none", "uniform", "met"), ("indicator", "softmax", "static")])
def test_composed_anchor_gradient_equals_paradigm_gradient(blocks):
    """In embedding form: jax.grad of L_i w.r.t. h_i (tangential) = GD Σ_j W_j (h_j' − R_j h_i')."""
    gd, w, r = blocks
    loss = _compose(gd, w, r, m=0.6, tau=0.2, u=0.3)
    rng = np.random.default_rng(0)
    h = rng.normal(size=(6, 5))
    hp = h + 0.4 * rng.normal(size=(6, 5))
    _assert_close(loss.anchor_gradient(h, hp), loss.paradigm_gradient(h, hp))


def test_compose_rebuilds_the_baseline():
    loss = gradlab.compose(gd="indicator", weight="softmax", ratio="static", m=0.3, tau=0.05, r=1.0)
    ref = get_loss("baseline", m=0.3, tau=0.05, r=1.0)
    assert loss == ref
    rng = np.random.default_rng(1)
    h, hp = rng.normal(size=(8, 6)), rng.normal(size=(8, 6))
    _assert_close(loss(h, hp), ref(h, hp))
    _assert_close(loss.anchor_gradient(h, hp), ref.paradigm_gradient(h, hp))


def test_compose_rejects_bad_blocks_and_params():
    with pytest.raises(ValueError, match="unknown gd block 'gate'"):
        gradlab.compose(gd="gate", weight="softmax", ratio="static")
    with pytest.raises(ValueError, match="unknown parameter"):
        gradlab.compose(gd="none", weight="uniform", ratio="met", tau=0.1)
    with pytest.raises(ValueError, match="tau"):
        gradlab.compose(gd="fraction", weight="softmax", ratio="static", tau=-1.0)


# --- 3. user losses in the simulator and the monitor -----------------------------------------
def _user_infonce(**kw):
    def infonce(c_pos, c_neg, *, tau):
        logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
        return jax.nn.logsumexp(logits, axis=-1) - c_pos / tau

    return gradlab.loss_from_cosines(infonce, name="my_infonce", params={"tau": 0.05}, rules={"tau": "positive"}, **kw)


def _user_mat():
    def mat(c_pos, c_neg, *, m):
        return jax.nn.relu(gradlab.geometry.safe_arccos(c_pos) - gradlab.geometry.safe_arccos(jnp.max(c_neg, -1)) + m)

    return gradlab.loss_from_cosines(mat, name="my_mat", params={"m": 0.15 * math.pi}, neg_reduction="max")


def _protocol():
    from gradlab.simulate import Protocol

    return Protocol(grid=5, batches=8, batch_size=16, seed=3, dtype="float64")


@pytest.mark.parametrize("method", ["direct", "factored"])
def test_user_infonce_simulates_to_the_builtin_map(method):
    """GD·Σ_j W_j is convention-free: the user's GD (W summing to one) is the paper's GD × Σ_j W_j = GD / τ."""
    from gradlab import simulate

    user = _user_infonce(neg_reduction="logsumexp")
    a = simulate.gd_map(user, _protocol(), method=method)
    b = simulate.gd_map("infonce", _protocol(), method=method)
    np.testing.assert_allclose(a.mean, b.mean / 0.05, rtol=1e-9, atol=1e-12)
    assert a.meta["method"] == ("lse" if method == "factored" else "direct")


@pytest.mark.parametrize("method", ["direct", "factored"])
def test_user_mpt_simulates_to_the_builtin_map(method):
    """MPT's W (one-hot) already sums to one: the same GD map, cell by cell."""
    from gradlab import simulate

    user = gradlab.loss_from_cosines(lambda c_pos, c_neg, *, m: jax.nn.relu(jnp.max(c_neg, -1) - c_pos + m),
                                     name="my_mpt", params={"m": 0.23}, neg_reduction="max")
    a = simulate.gd_map(user, _protocol(), method=method)
    b = simulate.gd_map("mpt", _protocol(), method=method)
    np.testing.assert_array_equal(a.mean, b.mean)


def test_a_user_loss_named_like_a_registered_one_gets_no_registered_shortcut():
    from gradlab import simulate

    fake = gradlab.loss_from_cosines(lambda c_pos, c_neg, *, m: jnp.sum(c_neg, -1) * m - c_pos, name="mpt",
                                     params={"m": 0.23})
    with pytest.raises(ValueError, match="user loss"):
        simulate.gd_map(fake, _protocol(), exact=True)
    assert simulate.gd_map(fake, _protocol()).meta["method"] == "direct"


def test_user_loss_without_declaration_takes_the_direct_path():
    from gradlab import simulate

    with pytest.raises(ValueError, match="no factored path"):
        simulate.gd_map(_user_infonce(), _protocol(), method="factored")
    assert simulate.gd_map(_user_infonce(), _protocol()).meta["method"] == "direct"


def test_user_mat_ratio_matches_the_builtin():
    from gradlab import simulate

    user = _user_mat()
    a = simulate.ratio_map(user, _protocol())
    b = simulate.ratio_map("mat", _protocol())
    # cells where the gate is open in every batch: there R is defined for both. (Elsewhere the
    # closed form still averages R over gated-off batches, the user loss only over open ones.)
    keep = (np.asarray(b.extra["gd"]) == 1.0) & ~np.asarray(b.mask)
    assert keep.sum() >= 2
    np.testing.assert_allclose(np.asarray(a.mean)[keep], np.asarray(b.mean)[keep], rtol=1e-9)


def test_user_infonce_weight_share_matches_the_builtin():
    from gradlab import simulate

    a = simulate.weight_map(_user_infonce(), _protocol(), method="direct")
    b = simulate.weight_map(get_loss("infonce"), _protocol(), method="direct")
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9, equal_nan=True)


def test_user_infonce_weight_share_sweeps_tau_on_its_own_spec():
    from gradlab import simulate

    a = simulate.weight_share(_protocol(), taus=(0.1, 0.05), loss=_user_infonce(), method="direct")
    b = simulate.weight_share(_protocol(), taus=(0.1, 0.05), loss="infonce", method="direct")
    assert a.meta["loss"] == "my_infonce"
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-9, equal_nan=True)


def test_ratio_map_of_a_gated_user_loss_has_no_unmasked_nan():
    """A hinge's W, R are undefined where GD = 0: those batches are left out; empty cells are masked."""
    from gradlab import simulate

    hinge = gradlab.loss_from_cosines(lambda c_pos, c_neg, *, m: jax.nn.relu(jnp.max(c_neg, -1) - c_pos + m),
                                      name="hinge", params={"m": 0.2})
    r = simulate.ratio_map(hinge, _protocol())
    mean, mask = np.asarray(r.mean), np.asarray(r.mask)
    assert np.all(np.isfinite(mean[~mask]))
    np.testing.assert_allclose(mean[~mask], 1.0, rtol=1e-12)


def test_monitor_accepts_user_and_composed_losses():
    from gradlab.monitor import ParadigmMonitor

    rng = np.random.default_rng(2)
    h = rng.normal(size=(12, 8))
    hp = h + 0.5 * rng.normal(size=(12, 8))
    user = _user_infonce()
    comp = gradlab.compose(gd="sigmoid", weight="hardest", ratio="mat", m=0.3)
    mon = ParadigmMonitor(losses=[user, "infonce", comp], ratio_losses=[comp], sink=None, dtype=np.float64)
    rec = mon.update(0, h, hp)
    assert rec["gd_mean"]["my_infonce"] == pytest.approx(rec["gd_mean"]["infonce"] / 0.05, rel=1e-9)
    hn, hpn = h / np.linalg.norm(h, axis=1, keepdims=True), hp / np.linalg.norm(hp, axis=1, keepdims=True)
    assert rec["gd_mean"][comp.name] == pytest.approx(float(np.mean(np.asarray(comp.components(hn, hpn).gd))), rel=1e-9)


# --- 4. resolve_loss and the CLI -----------------------------------------------------------------
LOSS_FILE = '''
import jax
import jax.numpy as jnp



def focal(c_pos, c_neg, *, tau=0.05, gamma=2.0):
    logits = jnp.concatenate([c_pos[..., None], c_neg], axis=-1) / tau
    log_p = c_pos / tau - jax.nn.logsumexp(logits, axis=-1)
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p


def needs_k(c_pos, c_neg, *, k):
    return k * (jnp.max(c_neg, -1) - c_pos)


def wrong_shape(c_pos, c_neg):
    return c_neg


def gives_nan(c_pos, c_neg):
    return jnp.log(c_pos - 2.0)


def one_argument(c_pos):
    return c_pos


def raises(c_pos, c_neg):
    return c_pos.no_such_attribute


def branches(c_pos, c_neg, *, gamma=2.0):
    if gamma > 0:  # a Python branch on a parameter's value
        return gamma * (jnp.max(c_neg, -1) - c_pos)
    return jnp.max(c_neg, -1) - c_pos


COUNT = 3
'''


@pytest.fixture
def loss_file(tmp_path):
    path = tmp_path / "my_losses.py"
    path.write_text(LOSS_FILE)
    return path


def test_resolve_loss_reads_every_spelling(loss_file, monkeypatch):
    assert resolve_loss("infonce", params={"tau": 0.1}) == get_loss("infonce", tau=0.1)
    assert resolve_loss("compose: gd=indicator, weight=softmax, ratio=static") == get_loss("baseline")
    focal = resolve_loss(f"{loss_file}:focal", params={"gamma": 0.0})
    assert dict(focal.params) == {"tau": 0.05, "gamma": 0.0}
    rng = np.random.default_rng(4)
    h, hp = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    _assert_close(focal(h, hp), get_loss("infonce", tau=0.05)(h, hp))  # γ = 0: InfoNCE
    monkeypatch.syspath_prepend(str(loss_file.parent))
    assert resolve_loss("my_losses:focal").name == "focal"  # package.module:function
    assert parse_compose("gd=none,weight=uniform,ratio=met") == {"gd": "none", "weight": "uniform", "ratio": "met"}


def test_resolve_loss_is_the_one_door(loss_file):
    import gradlab
    from gradlab.losses import apply_transform

    assert gradlab.resolve_loss is resolve_loss
    # a Loss: its parameters replaced, its own direction kept unless told
    sym = get_loss("infonce", tau=0.1, symmetric=True)
    assert resolve_loss(sym, params={"tau": 0.2}) == get_loss("infonce", tau=0.2, symmetric=True)
    assert resolve_loss(sym, symmetric=False) == get_loss("infonce", tau=0.1)
    # Rho et al. 2023 transforms go through apply_transform
    assert resolve_loss("transform:emphasize", params={"s": 2.0, "tau": 0.05}) == apply_transform("emphasize", s=2.0, tau=0.05)
    # the experiments' loss dicts; a call's params win over the dict's
    assert resolve_loss({"loss": "baseline", "params": {"m": 0.4}}) == get_loss("baseline", m=0.4)
    assert resolve_loss({"loss": "baseline", "params": {"m": 0.4}}, params={"m": 0.5}) == get_loss("baseline", m=0.5)
    assert resolve_loss({"compose": {"gd": "indicator", "weight": "softmax", "ratio": "static"}}) == get_loss("baseline")
    focal = resolve_loss({"user": f"{loss_file}:focal", "params": {"gamma": 1.0}})
    assert dict(focal.params) == {"tau": 0.05, "gamma": 1.0}
    with pytest.raises(ValueError, match="the file changed"):
        resolve_loss({"user": f"{loss_file}:focal", "sha256": "0" * 64})
    with pytest.raises(ValueError, match="one of 'loss', 'compose', 'user'"):
        resolve_loss({"loss": "infonce", "compose": {}})
    with pytest.raises(TypeError, match="a registered name"):
        resolve_loss(3.0)


@pytest.mark.parametrize("spec, message", [
    ("{dir}/absent.py:focal", "loss file not found"),
    ("{file}:absent", "has no function 'absent'"),
    ("{file}:one_argument", "must take (c_pos, c_neg"),
    ("{file}:wrong_shape", "must return shape (3,)"),
    ("{file}:gives_nan", "non-finite"),
    ("{file}:raises", "failed"),
    ("{file}:branches", "branch with jnp.where"),
    ("{file}:COUNT", "not a function"),
    ("{file}:needs_k", "no default"),
    ("no_such_module_xyz:f", "could not import module"),
    ("compose:gd=fraction,weight=softmax", "needs ratio"),
])
def test_resolve_loss_rejects_with_one_line(loss_file, spec, message):
    text = spec.format(dir=loss_file.parent, file=loss_file)
    with pytest.raises(ValueError) as info:
        resolve_loss(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_heatmap_accepts_file_function_and_compose(loss_file, tmp_path):
    from tests._cli import run

    out = tmp_path / "out"
    res = run("heatmap", "--loss", f"{loss_file}:focal", "--param", "gamma=1", "--grid", 3, "--batches", 2,
              "-N", 6, "--no-plot", "--out", out)
    assert res.exit_code == 0, res.output
    assert (out / "heatmap_focal_gamma1_gd.npz").is_file()
    res = run("heatmap", "--compose", "gd=sigmoid,weight=hardest,ratio=mat", "--component", "ratio", "--grid", 3,
              "--batches", 2, "-N", 6, "--no-plot", "--out", out)
    assert res.exit_code == 0, res.output
    assert (out / "heatmap_sigmoid-hardest-mat_ratio.npz").is_file()


@pytest.mark.parametrize("args", [
    ["--loss", "{dir}/absent.py:focal"],
    ["--loss", "{file}:absent"],
    ["--loss", "{file}:one_argument"],
    ["--loss", "{file}:wrong_shape"],
    ["--loss", "{file}:gives_nan"],
    ["--loss", "{file}:branches"],
    ["--loss", "{file}:focal", "--param", "beta=1"],
    ["--compose", "gd=indicator,weight=softmax"],
    ["--compose", "gd=indicator,weight=softmax,ratio=static", "--loss", "infonce"],
    [],
])
def test_cli_rejects_bad_losses_with_one_line_and_writes_nothing(loss_file, tmp_path, args):
    from tests._cli import one_line_error, run

    out = tmp_path / "out"
    args = [a.format(dir=loss_file.parent, file=loss_file) for a in args]
    res = run("heatmap", *args, "--grid", 3, "--batches", 2, "-N", 6, "--no-plot", "--out", out)
    one_line_error(res)
    assert not out.exists()


def test_train_config_takes_a_loss_object():
    from gradlab.real import TrainConfig

    comp = gradlab.compose(gd="fraction", weight="softmax", ratio="arccon", tau=0.1)
    d = TrainConfig(loss=comp, loss_params={"u": 0.2}, steps=1).to_dict()
    assert d["loss"] == "fraction-softmax-arccon" and d["loss_params"] == {"tau": 0.1, "u": 0.2}


# --- 5. Nie et al. 2023's gradient norms of any loss of cosines ---------------------------------
NORM_TWINS = {"infonce": "infonce", "dcl": "dcl", "dcl+": "dcl+", "mpt": "mpt", "met": "met", "mat": "mat"}
MAX_BASED = {"mpt", "met", "mat"}  # the hardest negative by max: autodiff shares it among K tied negatives


@pytest.mark.parametrize("reg", sorted(NORM_TWINS))
@pytest.mark.parametrize("k", [1, 64])
def test_autodiff_norms_equal_the_closed_forms(reg, k):
    """Autodiff of the registered value in cosine space against Nie et al. 2023's closed forms (float64)."""
    from gradlab import norms

    rng = np.random.default_rng(11)
    tp, tn = rng.uniform(0.05, math.pi - 0.05, 400), rng.uniform(0.05, math.pi - 0.05, 400)
    name = NORM_TWINS[reg]
    for part in ("pos", "neg"):
        closed = np.asarray(norms.norm_map(name, tp, tn, part=part, negatives=k))
        auto = np.asarray(norms.loss_norm(get_loss(reg), tp, tn, part=part, negatives=k))
        if part == "neg" and reg in MAX_BASED:
            closed = closed / k
        # absolute floor: autodiff of InfoNCE forms 1 − p_pos by cancellation where the positive dominates
        np.testing.assert_allclose(auto, closed, rtol=1e-9, atol=1e-12 * np.abs(closed).max(), err_msg=part)


def test_user_loss_norms_everywhere(loss_file, tmp_path):
    """A user loss gets the maps from autodiff: its γ = 0 focal twin is InfoNCE's closed form."""
    from gradlab import norms
    from gradlab.simulate import Protocol
    from tests._cli import one_line_error, run

    focal = resolve_loss(f"{loss_file}:focal", params={"gamma": 0.0})
    r = norms.norm_result(focal, part="neg", negatives=16, grid=12)
    twin = norms.norm_result("infonce", part="neg", negatives=16, grid=12, tau=0.05)
    assert r.meta["method"] == "autodiff" and twin.meta["method"] == "closed form"
    np.testing.assert_allclose(r.mean, twin.mean, rtol=1e-5, atol=1e-6 * np.abs(twin.mean).max())
    proto = Protocol(grid=5, batch_size=9)
    on_mu = norms.norm_on_mu_grid(focal, proto)
    np.testing.assert_allclose(on_mu.mean, norms.norm_on_mu_grid("infonce", proto).mean, rtol=1e-5, atol=1e-5)
    panels = norms.norm_panels([focal, "dcl"], parts=["pos"], negatives=[4, 8], grid=3)
    assert [(p.meta["loss"], p.meta["negatives"]) for p in panels] == [("focal", 4), ("focal", 8), ("dcl", 4)]
    with pytest.raises(ValueError, match="kind 'cosine'"):
        norms.norm_on_mu_grid(get_loss("vicreg"), proto)

    out = tmp_path / "out"
    res = run("norms", "--loss", f"{loss_file}:focal", "--loss", "compose:gd=sigmoid,weight=hardest,ratio=mat",
              "--param", "gamma=1", "--grid", 6, "-K", 8, "--part", "pos", "--no-plot", "--out", out)
    assert res.exit_code == 0, res.output
    with np.load(out / "norms_pos_gamma1.npz") as data:
        assert data["mean"].shape == (2, 6, 6) and np.all(np.isfinite(data["mean"]))
    res = run("heatmap", "--loss", f"{loss_file}:focal", "--component", "norm", "--grid", 4, "-N", 6,
              "--no-plot", "--out", out)
    assert res.exit_code == 0, res.output
    one_line_error(run("norms", "--loss", f"{loss_file}:absent", "--no-plot", "--out", tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
