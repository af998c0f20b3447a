"""gradlab.simulate: the Monte-Carlo engine against loop-based references, quadrature and itself."""

import math

import jax
import numpy as np
import pytest
from scipy import integrate, stats

import gradlab
from gradlab.io import Result
from gradlab.simulate import (
    Protocol,
    gd_map,
    lemma1_map,
    min_ratio_distribution,
    ratio_map,
    sample_angles,
    weight_map,
    weight_share,
)

# private on purpose: the quadrature's building blocks are checked against scipy one by one
from gradlab.simulate._quadrature import mean_gd_exact, prob_angle_below, threshold_angle

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

SMALL = Protocol(grid=(4, 5), batches=40, batch_size=10, dtype="float64")

# The losses that read their negatives through one reduction (Li et al. 2024 Table 1 and
# Nie et al. 2023: InfoNCE, ArcCon, DCL, DCL+ through Σ_j e^{c_j/τ}; MPT, MET, MAT through the
# hardest negative), written here as the witness of the registry's ``factored`` entries.
FACTORED = {"infonce": "lse", "arccon": "lse", "dcl": "lse", "dcl+": "lse", "mpt": "max", "met": "max", "mat": "max"}


# --- reference: a plain loop over cells and batches, written from the paper ---------------------
def loop_stats(loss, protocol, mu_pos=None, mu_neg=None):
    """Per cell: the per-batch GD, effective ratio and hardest-negative weight share, by
    evaluating loss.components_from_angles on the protocol's own draws, cell by cell."""
    loss = gradlab.get_loss(loss) if isinstance(loss, str) else loss
    mu_pos = protocol.mu_pos if mu_pos is None else np.atleast_1d(mu_pos)
    mu_neg = protocol.mu_neg if mu_neg is None else np.atleast_1d(mu_neg)
    out = {k: np.zeros((len(mu_pos), len(mu_neg), protocol.batches)) for k in ("gd", "ratio", "share")}
    for i, mp in enumerate(mu_pos):
        for j, mn in enumerate(mu_neg):
            tp, tn = sample_angles(protocol, mp, mn, cell=i * len(mu_neg) + j)
            tp, tn = np.asarray(tp), np.asarray(tn)
            comp = loss.components_from_angles(tp, tn)  # all batches of the cell at once
            w = np.asarray(comp.weight)
            r = np.broadcast_to(np.asarray(comp.ratio), w.shape)
            hard = np.argmax(np.cos(tn), axis=-1)
            out["gd"][i, j] = np.asarray(comp.gd)
            out["ratio"][i, j] = np.sum(w * r, -1) / np.sum(w, -1)
            out["share"][i, j] = np.take_along_axis(w, hard[:, None], -1)[:, 0] / np.sum(w, -1)
    return out


@pytest.fixture(scope="module")
def loops():
    return {name: loop_stats(name, SMALL) for name in FACTORED}


# --- protocol --------------------------------------------------------------------------------
def test_protocol_axes_and_validation():
    p = Protocol()
    assert p.grid_shape == (100, 100) and p.n_neg == 127
    assert p.mu_pos[0] == pytest.approx(math.pi / 20) and p.mu_pos[-1] == pytest.approx(math.pi / 2)
    assert p.mu_neg[-1] == pytest.approx(math.pi) and len(p.mu_neg) == 100
    assert Protocol(grid=(3, 7)).mu_neg.shape == (7,)
    assert p.to_dict()["grid"] == [100, 100]
    for bad, match in [
        (dict(grid=0), "grid"),
        (dict(grid=(3,)), "grid"),
        (dict(batch_size=1), "batch_size"),
        (dict(law="uniform"), "law"),
        (dict(mode="crn"), "mode"),
        (dict(dtype="int8"), "dtype"),
        (dict(chunk=0), "chunk"),
        (dict(sigma_pos=-1.0), "sigma_pos"),
        (dict(mu_neg_range=(2.0, 1.0)), "mu_neg_range"),
        (dict(seed=2**31), r"seed must be an int in \[0, 2\*\*31 - 1\]"),  # JAX takes int32 seeds
        (dict(batches=2**20, batch_size=2**12), "below 2\\*\\*31"),
    ]:
        with pytest.raises(ValueError, match=match):
            Protocol(**bad)


def test_sampling_laws():
    p = Protocol(grid=2, batches=500, batch_size=64, mu_neg_range=(3.0, 3.1), seed=3)
    tp, tn = sample_angles(p, 0.05, 3.1)
    tpr, tnr = sample_angles(p.replace(law="reflected"), 0.05, 3.1)
    assert float(tn.max()) > math.pi and float(tp.min()) < 0  # the normal law leaves [0, π] ...
    assert float(tnr.max()) <= math.pi and float(tpr.min()) >= 0  # ... the reflected one does not
    np.testing.assert_allclose(np.cos(tnr), np.cos(tn), atol=2e-6)
    # standard normals: the draws have the stated law (KS test on the negatives' z)
    z = (np.asarray(tn) - 3.1) / 0.1
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-3


# --- factored fast paths == direct evaluation == the loop ----------------------------------
def test_the_registry_names_the_factored_losses():
    facts = {n: gradlab.losses.get_spec(n).factored for n in gradlab.list_losses()}
    assert {n: f for n, f in facts.items() if f is not None} == FACTORED


@pytest.mark.parametrize("name", sorted(FACTORED))
def test_gd_and_ratio_paths_match_loop(name, loops):
    ref = loops[name]
    fast = ratio_map(name, SMALL, gd_threshold=0.0)
    direct = ratio_map(name, SMALL, gd_threshold=0.0, method="direct")
    gd = gd_map(name, SMALL)
    for r in (fast, direct):
        np.testing.assert_allclose(r.gd, ref["gd"].mean(-1), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(r.mean, ref["ratio"].mean(-1), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(r.gd_stderr, ref["gd"].std(-1, ddof=1) / np.sqrt(SMALL.batches), rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(gd.mean, fast.gd)
    assert gd.meta["method"] == FACTORED[name] and direct.meta["method"] == "direct"


@pytest.mark.parametrize("name", ["infonce", "arccon", "met", "mat"])
def test_float32_fast_path_matches_direct(name):
    p = SMALL.replace(dtype="float32", batches=64, batch_size=32, grid=6)
    a = gd_map(name, p)
    b = gd_map(name, p, method="direct")
    assert a.mean.dtype == np.float32
    tol = 1e-5 if FACTORED[name] == "lse" else 1.5 / p.batches  # an indicator may flip at a rounding tie
    np.testing.assert_allclose(a.mean, b.mean, atol=tol)


def test_weight_share_matches_loop_with_gate():
    p = SMALL.replace(batches=60)
    taus = (0.3, 0.05)
    res = weight_share(p, taus=taus, mu_pos=math.pi / 6, gd_gate=0.2)
    res_d = weight_share(p, taus=taus, mu_pos=math.pi / 6, gd_gate=0.2, method="direct")
    assert res.dims == ("tau", "mu_neg") and res.mean.shape == (2, 5)
    for k, tau in enumerate(taus):
        ref = loop_stats(gradlab.get_loss("infonce", tau=tau), p, mu_pos=math.pi / 6)
        passed = ref["gd"][0] >= 0.2
        n = passed.sum(-1)
        np.testing.assert_array_equal(res.mask[k], n == 0)
        np.testing.assert_allclose(res.passed[k], n / p.batches)
        with np.errstate(invalid="ignore"):
            want = np.where(n > 0, (ref["share"][0] * passed).sum(-1) / n, np.nan)
        np.testing.assert_allclose(res.mean[k], want, rtol=1e-9, equal_nan=True)
        np.testing.assert_allclose(res_d.mean[k], want, rtol=1e-9, equal_nan=True)
    assert res.mask.any() and not res.mask.all()  # the gate masks far negatives, keeps near ones
    assert np.all(np.isnan(res.mean[res.mask])) and np.all(np.isnan(res.stderr[res.mask]))
    # without a gate nothing is masked, and the share grows as τ falls (Fig. 3)
    free = weight_share(p, taus=taus)
    assert not free.mask.any() and np.all(free.mean[1] >= free.mean[0])


def test_weight_share_rules():
    assert np.all(weight_share(SMALL, taus=(0.1,), loss="dcl").mean <= 1)
    with pytest.raises(ValueError, match="tau"):
        weight_share(SMALL, loss="mpt")
    with pytest.raises(ValueError, match="taus"):
        weight_share(SMALL, taus=(0.0,))


@pytest.mark.parametrize("mode", ["common", "independent"])
def test_weight_map_matches_loop_with_gate(mode):
    p = SMALL.replace(mode=mode)
    loss = gradlab.get_loss("infonce", tau=0.1)
    res = weight_map(loss, p, gd_gate=0.2)
    assert res.dims == ("mu_pos", "mu_neg") and res.mean.shape == (4, 5)
    ref = loop_stats(loss, p)  # cell i·Q + j draws its own batches in independent mode
    passed = ref["gd"] >= 0.2
    n = passed.sum(-1)
    np.testing.assert_array_equal(res.mask, n == 0)
    np.testing.assert_allclose(res.passed, n / p.batches)
    np.testing.assert_allclose(res.gd, ref["gd"].mean(-1), rtol=1e-9)
    with np.errstate(invalid="ignore"):
        want = np.where(n > 0, (ref["share"] * passed).sum(-1) / n, np.nan)
    np.testing.assert_allclose(res.mean, want, rtol=1e-9, equal_nan=True)
    assert res.mask.any() and not res.mask.all()
    assert res.meta["statistic"] == "weight_map" and res.meta["gd_gate"] == 0.2


def test_weight_map_rows_are_weight_share_in_common_mode():
    p = Protocol(grid=(3, 4), batches=20, batch_size=8)
    res = weight_map("infonce", p, gd_gate=0.01)
    for i, mp in enumerate(p.mu_pos):
        row = weight_share(p, taus=(0.05,), mu_pos=float(mp), gd_gate=0.01)
        np.testing.assert_array_equal(res.mean[i], row.mean[0])
    with pytest.raises(ValueError, match="tau"):
        weight_map("mpt", p)
    with pytest.raises(ValueError, match="gd_gate"):
        weight_map("infonce", p, gd_gate=float("nan"))


def test_common_draws_are_made_once_per_protocol_and_kept(monkeypatch):
    from gradlab.simulate import _sampling

    calls = []
    real = _sampling.common_draws
    monkeypatch.setattr(_sampling, "common_draws", lambda protocol: calls.append(1) or real(protocol))
    monkeypatch.setattr(_sampling, "_KEPT_DRAWS", type(_sampling._KEPT_DRAWS)())
    p = Protocol(grid=3, batches=8, batch_size=5)
    first = gd_map("infonce", p)
    assert len(calls) == 1
    weight_share(p, taus=(0.3, 0.1, 0.05))
    again = gd_map("infonce", p)
    assert len(calls) == 1  # kept: every τ, every later map of this protocol
    np.testing.assert_array_equal(again.mean, first.mean)
    gd_map("infonce", p.replace(grid=4))  # the grid does not enter the draws
    assert len(calls) == 1
    for seed in range(1, 6):  # new draws for a new seed; the oldest are dropped past the few kept
        gd_map("infonce", p.replace(seed=seed))
    assert len(calls) == 6 and len(_sampling._KEPT_DRAWS) == _sampling._KEEP
    gd_map("infonce", p)
    assert len(calls) == 7


def test_simulate_modules_import_without_a_cycle():
    """Data flows one way inside gradlab.simulate: the module import graph is acyclic."""
    import ast
    import pathlib

    import gradlab.simulate as sim

    pkg = pathlib.Path(sim.__file__).parent
    graph = {}
    for path in pkg.glob("_*.py"):
        tree = ast.parse(path.read_text())
        graph[path.stem] = {
            node.module.rsplit(".", 1)[1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gradlab.simulate._")
        }
    assert graph["_quadrature"] and "_stats" not in graph["_quadrature"]
    state = {}

    def visit(m):
        state[m] = "open"
        for d in graph.get(m, ()):
            assert state.get(d) != "open", f"import cycle through {m} -> {d}"
            if d not in state:
                visit(d)
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m)
    assert "quadrature_gd_map" not in sim.__all__ and not hasattr(sim, "quadrature_gd_map")


# --- determinism -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["common", "independent"])
def test_bit_identical_whatever_the_chunk(mode):
    p = Protocol(grid=(5, 3), batches=30, batch_size=9, mode=mode)
    ref = gd_map("infonce", p)
    lem = weight_share(p, taus=(0.1,), gd_gate=0.5)
    for chunk in (1, 2):
        q = p.replace(chunk=chunk)
        assert np.array_equal(gd_map("infonce", q).mean, ref.mean)
        assert np.array_equal(weight_share(q, taus=(0.1,), gd_gate=0.5).mean, lem.mean, equal_nan=True)
    # the law changes the sampled angles, not the geometry the statistics see
    assert np.array_equal(gd_map("infonce", p.replace(law="reflected")).mean, ref.mean)
    assert not np.array_equal(gd_map("infonce", p.replace(seed=1)).mean, ref.mean)


def test_independent_cells_side_by_side_give_the_same_map(monkeypatch):
    """A GPU computes independent-mode cells in groups (one vectorized program per group): the
    map is the one-cell-at-a-time map to rounding, and bit for bit the same whatever the chunk."""
    from gradlab.simulate import _engine

    p = Protocol(grid=(5, 3), batches=30, batch_size=9, mode="independent")
    one_at_a_time = gd_map("infonce", p)
    monkeypatch.setattr(_engine, "_CELL_GROUP", {gradlab.backend.current(): 4})
    assert _engine.cell_group() == 4
    grouped = gd_map("infonce", p)  # 15 cells: 4 groups, the last padded
    np.testing.assert_allclose(grouped.mean, one_at_a_time.mean, rtol=2e-6)
    np.testing.assert_allclose(grouped.stderr, one_at_a_time.stderr, rtol=2e-5)
    for chunk in (1, 8, 12):
        assert np.array_equal(gd_map("infonce", p.replace(chunk=chunk)).mean, grouped.mean)


@pytest.mark.parametrize("mode", ["common", "independent"])
def test_the_gpus_engine_choices_give_the_cpus_maps(mode):
    """On a GPU the engine takes other fixed choices (the common mode's table stage 128 μ_neg
    columns a step, not 4; independent cells 128 side by side; the tables' log-sum-exp in one
    pass): with the GPU's choices (``gradlab.backend.choices_for``) on this CPU, the maps of a
    log-sum-exp table (InfoNCE) and of a max table (MPT) are the CPU's to rounding."""
    from gradlab.simulate import _engine

    p = Protocol(grid=(4, 7), batches=40, batch_size=9, mode=mode)
    on_cpu = {loss: gd_map(loss, p) for loss in ("infonce", "mpt")}
    with gradlab.backend.choices_for("gpu"):
        assert (_engine.neg_chunk(), _engine.cell_group()) == (128, 128)
        got = {loss: gd_map(loss, p) for loss in on_cpu}  # 7 columns in one step of 128; 28 cells in one group of 128
    for loss, want in on_cpu.items():
        np.testing.assert_allclose(got[loss].mean, want.mean, rtol=2e-6, atol=1e-12)
        np.testing.assert_allclose(got[loss].stderr, want.stderr, rtol=2e-5, atol=1e-12)


def test_independent_mode_uses_fold_in_per_cell():
    p = Protocol(grid=(2, 3), batches=25, batch_size=6, mode="independent", dtype="float64")
    res = gd_map("mpt", p)
    ref = loop_stats("mpt", p)["gd"].mean(-1)
    np.testing.assert_array_equal(res.mean, ref)
    # cells really have their own draws
    a, _ = sample_angles(p, 0.5, 1.0, cell=0)
    b, _ = sample_angles(p, 0.5, 1.0, cell=1)
    assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_progress_hook_and_result_bundle(tmp_path):
    calls = []
    p = Protocol(grid=(9, 4), batches=20, batch_size=5, chunk=1)
    res = gd_map("infonce", p, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (9, 9) and all(t == 9 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) > 1
    assert np.array_equal(res.mean, gd_map("infonce", p).mean)  # steps do not change numbers
    assert res.meta["loss"] == "infonce" and res.meta["params"] == {"tau": 0.05}
    assert res.meta["protocol"]["batches"] == 20 and res.meta["jax_version"] == jax.__version__
    res.save(tmp_path / "gd")
    assert Result.load(tmp_path / "gd") == res


def test_loss_objects_and_errors():
    loss = gradlab.get_loss("infonce", tau=0.2)
    a = gd_map(loss, SMALL)
    assert a.meta["params"] == {"tau": 0.2}
    assert not np.array_equal(a.mean, gd_map("infonce", SMALL).mean)
    with pytest.raises(ValueError, match="unknown loss"):
        gd_map("nope", SMALL)
    with pytest.raises(TypeError, match="loss"):
        gd_map(3, SMALL)
    with pytest.raises(ValueError, match="quadrature"):
        gd_map("infonce", SMALL, exact=True)
    with pytest.raises(ValueError, match="method"):
        gd_map("infonce", SMALL, method="fast")
    with pytest.raises(TypeError, match="Protocol"):
        gd_map("infonce", {"grid": 3})


def test_ratio_mask():
    p = Protocol(grid=6, batches=50, batch_size=16)
    r = ratio_map("arccon", p, gd_threshold=0.05)
    upper = p.mu_pos[:, None] > p.mu_neg[None, :]
    assert np.all(r.mask[upper]) and np.all(r.mask == (upper | (r.gd < 0.05)))
    # ArcCon's ratio sin(θ+u)/sin θ is > 1 for θ + u < π/2 and depends on μ_pos only
    assert np.all(r.mean[:3] > 1)
    np.testing.assert_allclose(r.mean, r.mean[:, :1] * np.ones((1, 6)), rtol=1e-6)


# --- quadrature ------------------------------------------------------------------------------
def test_prob_angle_below_matches_sampling_and_quad():
    rng = np.random.default_rng(0)
    theta = rng.normal(0.1, 0.1, 400_000)
    folded = np.abs(np.mod(theta + np.pi, 2 * np.pi) - np.pi)
    for a in (0.05, 0.2, 3.0):
        assert prob_angle_below(a, 0.1, 0.1) == pytest.approx(np.mean(folded < a), abs=3e-3)
    assert prob_angle_below(np.inf, 1.0, 0.1) == 1.0
    # the exact map against SciPy's adaptive quadrature of the same integrand
    for name, m in (("mpt", 0.23), ("met", 0.45), ("mat", 0.15 * math.pi)):
        for mp, mn in ((0.3, 0.4), (0.5, 1.2), (1.4, 3.1)):

            def f(t, mp=mp, mn=mn, name=name, m=m):
                a = threshold_angle(name, mp + 0.05 * t, m)
                return (1 - (1 - prob_angle_below(a, mn, 0.1)) ** 127) * stats.norm.pdf(t)

            want = integrate.quad(f, -10, 10, limit=200, points=[0.0])[0]
            got = mean_gd_exact(name, m, [mp], [mn], 0.05, 0.1, 127)[0, 0]
            assert got == pytest.approx(want, abs=1e-7)


@pytest.mark.parametrize("name", ["mpt", "met", "mat"])
@pytest.mark.parametrize("mode", ["common", "independent"])
def test_monte_carlo_agrees_with_quadrature(name, mode):
    p = Protocol(grid=16, batches=400, batch_size=32, mode=mode, seed=11)
    mc = gd_map(name, p)
    exact = gd_map(name, p, exact=True)
    assert exact.stderr is None and exact.meta["method"] == "quadrature"
    q = exact.mean
    se = np.sqrt(q * (1 - q) / p.batches)  # the estimator's true standard error
    ok = np.abs(mc.mean - q) <= 4 * se + 1e-6
    assert ok.mean() >= 0.99, (ok.mean(), np.argwhere(~ok))
    assert 0.01 < q.mean() < 0.99  # the map is not trivially all 0 or all 1


# --- Lemma 1 ---------------------------------------------------------------------------------
def test_lemma1_map_matches_loop():
    from tests.test_lemma1 import _sphere_numpy

    p = Protocol(grid=(3, 4), batches=50, batch_size=8, dtype="float64", seed=5)
    ratios = (1.0, 1.5, 2.0)
    res = lemma1_map(p, lam=0.3, ratios=ratios)
    from gradlab.simulate._sampling import common_draws

    _, _, u = common_draws(p)
    alpha = np.pi * np.asarray(u)
    for i, mp in enumerate(p.mu_pos):
        for j, mn in enumerate(p.mu_neg):
            tp, tn = (np.asarray(x) for x in sample_angles(p, mp, mn))
            lows, feas, sat, closer = [], [], [], []
            for b in range(p.batches):
                t_p = np.arccos(np.cos(tp[b]))
                t_n = np.arccos(np.max(np.cos(tn[b])))  # the hardest negative
                closer.append([_sphere_numpy(t_p, t_n, alpha[b], 0.3, r) <= 0 for r in ratios])
                s, t = np.sin(t_p), np.sin(t_n)
                disc = s**2 - (0.3 * t * np.sin(alpha[b])) ** 2
                ok = disc >= 0
                feas.append(ok)
                if ok:
                    lo = 1 / 0.3 + t * np.cos(alpha[b]) / s - np.sqrt(disc) / (0.3 * s)
                    hi = 1 / 0.3 + t * np.cos(alpha[b]) / s + np.sqrt(disc) / (0.3 * s)
                    lows.append(lo)
                    sat.append([lo <= r <= hi for r in ratios])
                else:
                    sat.append([False] * len(ratios))
            assert res.feasible[i, j] == pytest.approx(np.mean(feas))
            np.testing.assert_allclose(res.satisfied[:, i, j], np.mean(sat, axis=0))
            np.testing.assert_allclose(res.sphere_closer[:, i, j], np.mean(closer, axis=0))  # 3-vector rotation
            np.testing.assert_allclose(res.sphere_disagree[:, i, j], np.mean(np.not_equal(sat, closer), axis=0))
            if lows:
                assert res.mean[i, j] == pytest.approx(np.mean(lows), rel=1e-9)
            else:
                assert res.mask[i, j]
    assert res.satisfied.shape == (3, 3, 4) and np.array_equal(res.coords["r"], ratios)
    assert np.all((res.sphere_disagree >= 0) & (res.sphere_disagree <= 1))


def test_lemma1_map_alpha_laws():
    p = Protocol(grid=3, batches=30, batch_size=8)
    fixed = lemma1_map(p, alpha_law=0.0)
    assert np.all(fixed.feasible == 1)  # α = 0: always feasible (s² ≥ 0)
    inv = lemma1_map(p, alpha_law=lambda u: 0.0 * u)
    np.testing.assert_array_equal(inv.mean, fixed.mean)
    with pytest.raises(ValueError, match="alpha_law"):
        lemma1_map(p, alpha_law="normal")
    with pytest.raises(ValueError, match="lam"):
        lemma1_map(p, lam=0)


def test_min_ratio_distribution():
    p = Protocol(batches=2000, batch_size=16)
    res = min_ratio_distribution(p, lams=(0.01, 1.0), return_samples=True, alpha_law=0.0)
    # α = 0: r_low = 1/λ + t/s − 1/λ = t/s exactly, t/s = sin θ_min / sin θ_pos
    s = res.samples
    assert res.dims == ("lam",) and s.shape == (2, 2000) and np.all(res.feasible == 1)
    tp, tn = (np.asarray(x) for x in sample_angles(p, math.pi / 6, math.pi / 3))
    want = np.sin(np.arccos(np.cos(tn)).min(-1)) / np.abs(np.sin(tp))
    np.testing.assert_allclose(s[0], want, rtol=2e-4)
    np.testing.assert_allclose(s[1], want, rtol=2e-4)
    assert res.mean == pytest.approx(want.mean(), rel=1e-4)
    widths = np.diff(res.bin_edges)
    total = (res.histogram * widths).sum(-1) + res.below + res.above
    np.testing.assert_allclose(total, 1.0)
    assert res.quantiles.shape == (2, 5)
    # the empirical CDF at the static ratios, counted here sample by sample
    assert res.coords["ratio"].tolist() == [1.0, 1.25, 1.5, 1.75, 2.0] and res.cdf.shape == (2, 5)
    for k in range(2):
        for m, r in enumerate(res.coords["ratio"]):
            assert res.cdf[k, m] == sum(1 for v in s[k] if v <= r) / s.shape[1]
    odd = min_ratio_distribution(p.replace(batches=50), lams=(0.1,), ratios=(0.7,), alpha_law=0.0)
    assert odd.cdf.shape == (1, 1)
