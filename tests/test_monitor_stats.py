"""The monitor's statistics against independent witnesses.

1. A loop-based NumPy reference written from the papers (Li et al. 2024 Table 1, Sec. 3.2,
   App. C; Wang & Isola; Zhang et al. 2022), float64, one anchor at a time.
2. Embeddings built from prescribed angles (keys with a known Gram matrix, anchors
   placed at chosen cosines to every key), whose truth is known in closed form or
   through the loss zoo's angle form ``components_from_angles`` (the simulator's kernel).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradlab
from gradlab.monitor import ParadigmMonitor, analyze

TAUS = (0.3, 0.05, 0.01)
LAMBDAS = (0.1, 0.5)
LOSS_PARAMS = {
    "infonce": {"tau": 0.1},
    "arccon": {"tau": 0.05, "u": math.pi / 18},
    "mpt": {"m": 0.3},
    "met": {"m": 0.45},
    "mat": {"m": 0.15 * math.pi},
}
MARGIN = 0.25
GD_THRESHOLD = 0.01


def _losses():
    return [gradlab.get_loss(name, **p) for name, p in LOSS_PARAMS.items()]


def _monitor(dtype=np.float64, **kw):
    return ParadigmMonitor(
        losses=_losses(), taus=TAUS, lambdas=LAMBDAS, margin=MARGIN, sink=None,
        ratio_losses=[gradlab.get_loss("arccon", **LOSS_PARAMS["arccon"]),
                      gradlab.get_loss("met", **LOSS_PARAMS["met"]),
                      gradlab.get_loss("mat", **LOSS_PARAMS["mat"])],
        gd_threshold=GD_THRESHOLD, dtype=dtype, **kw,
    )


# ---------------------------------------------------------------------------------
# loop-based reference
# ---------------------------------------------------------------------------------
def _unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / math.sqrt(float(v @ v))


def _acos(c):
    return math.acos(max(-1.0, min(1.0, c)))


def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs):
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _softmax(xs):
    top = max(xs)
    e = [math.exp(x - top) for x in xs]
    s = sum(e)
    return [x / s for x in e]


def _ref_gd(name, p, c_pos, negs):
    """GD of one anchor (Li et al. 2024 Table 1; Nie et al. 2023 for MAT). negs: cosines to the negatives."""
    c_max = max(negs)
    if name == "infonce":
        s = sum(math.exp(c / p["tau"]) for c in negs)
        return 1.0 / (1.0 + math.exp(c_pos / p["tau"]) / s)
    if name == "arccon":
        s = sum(math.exp(c / p["tau"]) for c in negs)
        return 1.0 / (1.0 + math.exp(math.cos(_acos(c_pos) + p["u"]) / p["tau"]) / s)
    if name == "mpt":
        return float(c_pos - c_max < p["m"])
    if name == "met":
        d = lambda c: math.sqrt(max(0.0, 2 - 2 * c))  # noqa: E731
        return float(d(c_max) - d(c_pos) < p["m"])
    if name == "mat":
        return float(_acos(c_max) - _acos(c_pos) < p["m"])
    raise KeyError(name)


def _ref_ratio(name, p, c_pos, c_hard):
    if name == "arccon":
        t = _acos(c_pos)
        return math.sin(t + p["u"]) / math.sin(t)
    if name == "met":
        return math.sqrt((1 - c_hard) / (1 - c_pos))
    if name == "mat":
        return math.sin(_acos(c_hard)) / math.sin(_acos(c_pos))
    raise KeyError(name)


def _ref_lemma1_low_high(theta_p, theta_n, alpha, lam):
    """App. C / Sec. 3.1.3 in the paper's own form: 1/λ + t cos α / s ∓ √(1/λ² − t² sin²α / s²)."""
    s, t = math.sin(theta_p), math.sin(theta_n)
    inside = 1 / lam**2 - t**2 * math.sin(alpha) ** 2 / s**2
    if inside < 0:
        return None
    centre = 1 / lam + t * math.cos(alpha) / s
    return centre - math.sqrt(inside), centre + math.sqrt(inside)


def _ref_uniform(x, t=2.0):
    n = len(x)
    vals = [math.exp(-t * float((x[i] - x[j]) @ (x[i] - x[j]))) for i in range(n) for j in range(i + 1, n)]
    return math.log(_mean(vals))


def _ref_collapse(x):
    o = sum(x) / len(x)
    return math.sqrt(float(o @ o)), _mean([math.sqrt(float((z - o) @ (z - o))) for z in x])


def reference(h, hp):
    h = [_unit(r) for r in h]
    hp = [_unit(r) for r in hp]
    n = len(h)
    C = [[float(h[i] @ hp[j]) for j in range(n)] for i in range(n)]
    pos = [_acos(C[i][i]) for i in range(n)]
    neg = [_acos(C[i][j]) for i in range(n) for j in range(n) if j != i]
    out = {"mu_pos": _mean(pos), "sigma_pos": _std(pos), "mu_neg": _mean(neg), "sigma_neg": _std(neg),
           "cos_pos_mean": _mean([C[i][i] for i in range(n)])}
    hard = []
    for i in range(n):
        best = None
        for j in range(n):
            if j != i and (best is None or C[i][j] > C[i][best]):
                best = j
        hard.append(best)
    gd_mean, gd_off = {}, {}
    gds = {}
    for name, p in LOSS_PARAMS.items():
        g = [_ref_gd(name, p, C[i][i], [C[i][j] for j in range(n) if j != i]) for i in range(n)]
        gds[name] = g
        gd_mean[name] = _mean(g)
        gd_off[name] = _mean([float(x < GD_THRESHOLD) for x in g])
    g = [float(C[i][i] - C[i][hard[i]] < MARGIN) for i in range(n)]
    gd_mean["baseline"], gd_off["baseline"] = _mean(g), _mean([float(x < GD_THRESHOLD) for x in g])
    out["gd_mean"], out["gd_off_fraction"] = gd_mean, gd_off
    ratio, ratio_pass = {}, {}
    for name in ("arccon", "met", "mat"):
        passing = [i for i in range(n) if gds[name][i] >= GD_THRESHOLD]
        vals = [_ref_ratio(name, LOSS_PARAMS[name], C[i][i], C[i][hard[i]]) for i in passing]
        ratio[name] = _mean(vals) if vals else float("nan")
        ratio_pass[name] = len(passing) / n
    out["ratio"], out["ratio_pass_fraction"] = ratio, ratio_pass
    hs, ws = {}, {}
    for tau in TAUS:
        proj, simple = [], []
        for i in range(n):
            js = [j for j in range(n) if j != i]
            w = dict(zip(js, _softmax([C[i][j] / tau for j in js]), strict=True))
            simple.append(w[hard[i]])
            tang = {j: hp[j] - C[i][j] * h[i] for j in js}  # tangent part of h_j' at h_i
            v = sum(w[j] * tang[j] for j in js)
            proj.append(w[hard[i]] * float(tang[hard[i]] @ v) / float(v @ v))
        hs[f"{tau:g}"], ws[f"{tau:g}"] = _mean(proj), _mean(simple)
    out["hardest_share"], out["weight_share"] = hs, ws
    l1, feas, sat, per_anchor = {}, {}, {}, {}
    for lam in LAMBDAS:
        lows, nf, ns = [], 0, 0
        for i in range(n):
            j = hard[i]
            tp = hp[i] - C[i][i] * h[i]
            tn = hp[j] - C[i][j] * h[i]
            alpha = _acos(float(tp @ tn) / math.sqrt(float(tp @ tp) * float(tn @ tn)))
            res = _ref_lemma1_low_high(pos[i], _acos(C[i][j]), alpha, lam)
            if res is None:
                lows.append(float("nan"))
                continue
            nf += 1
            lows.append(res[0])
            ns += res[0] <= 1.0 <= res[1]
        arr = np.array(lows)
        key = f"{lam:g}"
        summary = {"mean": float(np.nanmean(arr)) if nf else float("nan")}
        for q, nm in zip((0.1, 0.25, 0.5, 0.75, 0.9), ("q10", "q25", "q50", "q75", "q90"), strict=True):
            summary[nm] = float(np.nanquantile(arr, q)) if nf else float("nan")
        l1[key], feas[key], sat[key], per_anchor[key] = summary, nf / n, ns / n, arr
    out["lemma1_min_ratio"], out["lemma1_feasible_fraction"], out["lemma1_satisfied_fraction"] = l1, feas, sat
    out["_per_anchor"] = per_anchor
    out["align"] = _mean([float((h[i] - hp[i]) @ (h[i] - hp[i])) for i in range(n)])
    out["uniform"] = 0.5 * (_ref_uniform(h) + _ref_uniform(hp))
    mo1, mr1 = _ref_collapse(h)
    mo2, mr2 = _ref_collapse(hp)
    out["m_o"], out["m_r"] = 0.5 * (mo1 + mo2), 0.5 * (mr1 + mr2)
    return out


def _compare(got, want, rtol, atol, path=""):
    for k, w in want.items():
        if k.startswith("_"):
            continue
        g = got[k]
        if isinstance(w, dict):
            _compare(g, w, rtol, atol, f"{path}{k}/")
        elif w is None or (isinstance(w, float) and math.isnan(w)):
            assert g is None, f"{path}{k}: expected NaN/None, got {g}"
        else:
            assert g is not None, f"{path}{k}: got None, expected {w}"
            assert g == pytest.approx(w, rel=rtol, abs=atol), f"{path}{k}: {g} != {w}"


def _random_batch(rng, n, d, noise):
    h = rng.normal(size=(n, d))
    hp = h + noise * rng.normal(size=(n, d))
    return h, hp


@pytest.mark.x64
@pytest.mark.parametrize("seed,n,d,noise", [
    (0, 12, 6, 0.6),
    (2, 2, 3, 0.3),  # N = 2: one negative per anchor
    (1, 9, 24, 1.0),
    (3, 16, 5, 0.2),
])
def test_every_statistic_matches_loop_reference_float64(seed, n, d, noise):
    rng = np.random.default_rng(seed)
    h, hp = _random_batch(rng, n, d, noise)
    rec = _monitor().update(0, h, hp)
    assert rec["valid"] and rec["reason"] is None and (rec["n"], rec["d"]) == (n, d)
    _compare(rec, reference(h, hp), rtol=1e-9, atol=1e-11)


def test_statistics_float32_close_to_reference():
    rng = np.random.default_rng(5)
    h, hp = _random_batch(rng, 32, 48, 0.7)
    rec = _monitor(dtype=np.float32).update(0, h.astype(np.float32), hp.astype(np.float32))
    ref = reference(h.astype(np.float32), hp.astype(np.float32))
    # float32: angles / cosines to ~1e-6; indicator GDs may flip only at exact ties (none here).
    _compare(rec, ref, rtol=2e-4, atol=2e-5)


def test_reference_batch_has_varied_values():
    """Guard against a vacuous comparison: the reference batch exercises both gate states."""
    rng = np.random.default_rng(0)
    h, hp = _random_batch(rng, 12, 6, 0.6)
    ref = reference(h, hp)
    assert 0 < ref["gd_mean"]["mpt"] < 1 and 0 < ref["gd_mean"]["baseline"] < 1
    assert 0 < ref["lemma1_feasible_fraction"]["0.5"] <= 1
    assert all(0 < v < 1 for v in ref["hardest_share"].values())


@pytest.mark.x64
def test_analyze_matches_monitor_per_batch_and_reference():
    rng = np.random.default_rng(7)
    h, hp = _random_batch(rng, 3 * 10 + 4, 8, 0.5)
    res = analyze(h, hp, batch_size=10, losses=_losses(), taus=TAUS, lambdas=LAMBDAS, margin=MARGIN,
                  ratio_losses=["arccon", "met", "mat"], gd_threshold=GD_THRESHOLD, dtype=np.float64)
    assert res["n_batches"] == 3 and res["dropped"] == 4 and res["mu_pos"].shape == (3,)
    for b in range(3):
        ref = reference(h[10 * b:10 * (b + 1)], hp[10 * b:10 * (b + 1)])
        assert res["mu_pos"][b] == pytest.approx(ref["mu_pos"], rel=1e-10)
        assert res["hardest_share"]["0.05"][b] == pytest.approx(ref["hardest_share"]["0.05"], rel=1e-9)
        assert res["gd_mean"]["infonce"][b] == pytest.approx(ref["gd_mean"]["infonce"], rel=1e-9)
        assert res["lemma1_min_ratio"]["0.1"]["q50"][b] == pytest.approx(ref["lemma1_min_ratio"]["0.1"]["q50"], rel=1e-9)
        np.testing.assert_allclose(res["lemma1_min_ratio_per_anchor"]["0.5"][b], ref["_per_anchor"]["0.5"],
                                   rtol=1e-9, equal_nan=True)
        assert res["m_r"][b] == pytest.approx(ref["m_r"], rel=1e-10)


def test_analyze_rejects_bad_input():
    h = np.ones((20, 4))
    with pytest.raises(ValueError, match="full batch"):
        analyze(h, h, batch_size=32)
    bad = np.random.default_rng(0).normal(size=(20, 4))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        analyze(bad, bad, batch_size=10)
    with pytest.raises(ValueError, match="batch_size"):
        analyze(h, h, batch_size=1)


# ---------------------------------------------------------------------------------
# prescribed angles: known truth
# ---------------------------------------------------------------------------------
def build_from_angles(theta_pos, theta_neg, rho):
    """Embeddings whose anchor-key angles are exactly the prescribed ones.

    Keys h_k' = √ρ u + √(1−ρ) e_k (mutual cosine ρ, Gram G' = (1−ρ)I + ρ11ᵀ). Anchor i
    gets cosines c_i (c_ii = cos θ_pos[i], c_ij = cos θ_neg[i, j] for j ≠ i):
    h_i = Σ_k a_k h_k' + q f_i with G' a = c_i, q = √(1 − c_iᵀ G'^{-1} c_i), f_i private.
    theta_neg is (N, N) with the diagonal ignored.
    """
    n = len(theta_pos)
    d = 2 * n + 1
    eye = np.eye(d)
    keys = np.stack([math.sqrt(rho) * eye[0] + math.sqrt(1 - rho) * eye[1 + k] for k in range(n)])
    gram = keys @ keys.T
    anchors = []
    for i in range(n):
        c = np.cos(theta_neg[i]).copy()
        c[i] = math.cos(theta_pos[i])
        a = np.linalg.solve(gram, c)
        inside = 1 - c @ a
        assert inside > 1e-6, "prescribed angles not realizable with this rho"
        anchors.append(a @ keys + math.sqrt(inside) * eye[n + 1 + i])
    return np.stack(anchors), keys, gram


@pytest.mark.x64
def test_prescribed_angles_known_truth():
    rng = np.random.default_rng(11)
    n, rho = 10, 0.45
    mu_pos, s_pos, mu_neg, s_neg = 0.6, 0.05, 1.1, 0.10
    theta_pos = mu_pos + s_pos * rng.standard_normal(n)
    theta_neg = mu_neg + s_neg * rng.standard_normal((n, n))
    h, hp, gram = build_from_angles(theta_pos, theta_neg, rho)
    # the construction is exact
    C = h @ hp.T
    np.testing.assert_allclose(np.diag(C), np.cos(theta_pos), atol=1e-12)
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(C[off], np.cos(theta_neg)[off], atol=1e-12)

    mon = _monitor(histograms=True)
    rec = mon.update(0, h, hp)
    tn = theta_neg[off]
    assert rec["mu_pos"] == pytest.approx(theta_pos.mean(), abs=1e-10)
    assert rec["sigma_pos"] == pytest.approx(theta_pos.std(ddof=1), abs=1e-10)
    assert rec["mu_neg"] == pytest.approx(tn.mean(), abs=1e-10)
    assert rec["sigma_neg"] == pytest.approx(tn.std(ddof=1), abs=1e-10)
    assert rec["cos_pos_mean"] == pytest.approx(np.cos(theta_pos).mean(), abs=1e-12)
    assert rec["align"] == pytest.approx(np.mean(2 - 2 * np.cos(theta_pos)), abs=1e-12)
    # keys' center: ‖o'‖² = (1 + (N−1)ρ)/N; its residual norms are all equal: √(1 − ‖o'‖²)
    mo_keys = math.sqrt((1 + (n - 1) * rho) / n)
    from gradlab.collapse import collapse_ratios
    mo_h, mr_h = (float(x) for x in collapse_ratios(h))
    assert rec["m_o"] == pytest.approx(0.5 * (mo_h + mo_keys), abs=1e-12)
    assert rec["m_r"] == pytest.approx(0.5 * (mr_h + math.sqrt(1 - mo_keys**2)), abs=1e-12)

    # GD / weight / ratio through the loss zoo's angle form (the simulator's kernel)
    neg_angles = np.stack([np.delete(theta_neg[i], i) for i in range(n)])  # (N, N-1)
    hard = np.argmin(neg_angles, axis=1)
    for name, p in LOSS_PARAMS.items():
        comp = gradlab.get_loss(name, **p).components_from_angles(theta_pos, neg_angles)
        gd = np.asarray(comp.gd)
        assert rec["gd_mean"][name] == pytest.approx(gd.mean(), abs=1e-12)
        assert rec["gd_off_fraction"][name] == pytest.approx(np.mean(gd < GD_THRESHOLD), abs=1e-12)
        if name in ("arccon", "met", "mat"):
            r = np.broadcast_to(np.asarray(comp.ratio), neg_angles.shape)[np.arange(n), hard]
            gate = gd >= GD_THRESHOLD
            want = r[gate].mean() if gate.any() else None
            assert rec["ratio"][name] == (pytest.approx(want, rel=1e-10) if want is not None else None)
    for tau in TAUS:
        w = np.asarray(gradlab.get_loss("infonce", tau=tau).components_from_angles(theta_pos, neg_angles).weight)
        share = w[np.arange(n), hard] / w.sum(axis=1)
        assert rec["weight_share"][f"{tau:g}"] == pytest.approx(share.mean(), rel=1e-10)
    # Lemma 1 with α known from the construction: cos α = (ρ − c_p c_j) / (s t)
    for lam in LAMBDAS:
        th_hard = neg_angles[np.arange(n), hard]
        cos_alpha = (rho - np.cos(theta_pos) * np.cos(th_hard)) / (np.sin(theta_pos) * np.sin(th_hard))
        low, high, ok = (np.asarray(x) for x in gradlab.lemma1_bounds(theta_pos, th_hard, np.arccos(cos_alpha), lam))
        assert rec["lemma1_feasible_fraction"][f"{lam:g}"] == pytest.approx(ok.mean(), abs=1e-12)
        assert rec["lemma1_min_ratio"][f"{lam:g}"]["q50"] == pytest.approx(np.nanmedian(low), rel=1e-9)
        sat = np.mean(ok & (low <= 1) & (1 <= high))
        assert rec["lemma1_satisfied_fraction"][f"{lam:g}"] == pytest.approx(sat, abs=1e-12)
    # histograms hold every pair once
    hist = rec["histograms"]
    assert sum(hist["cos_pos"]) == n and sum(hist["cos_neg"]) == n * (n - 1)
    edges = np.asarray(hist["edges_cos"])
    counts, _ = np.histogram(np.cos(tn), bins=edges)
    assert list(counts) == [int(c) for c in hist["cos_neg"]]


@pytest.mark.x64
def test_angle_law_recovered_on_large_batch():
    """Angles drawn from the paper's laws: the estimates recover μ and σ within a few standard errors."""
    rng = np.random.default_rng(3)
    n, rho = 30, 0.35
    mu_pos, s_pos, mu_neg, s_neg = 0.9, 0.05, 1.3, 0.05
    theta_pos = mu_pos + s_pos * rng.standard_normal(n)
    theta_neg = mu_neg + s_neg * rng.standard_normal((n, n))
    h, hp, _ = build_from_angles(theta_pos, theta_neg, rho)
    rec = _monitor().update(0, h, hp)
    assert abs(rec["mu_pos"] - mu_pos) < 4 * s_pos / math.sqrt(n)
    assert abs(rec["mu_neg"] - mu_neg) < 4 * s_neg / math.sqrt(n * (n - 1))
    assert rec["sigma_pos"] == pytest.approx(s_pos, rel=0.5)
    assert rec["sigma_neg"] == pytest.approx(s_neg, rel=0.15)


@pytest.mark.x64
def test_hardest_share_closed_form():
    """Known truth in D = 3: all anchors at e1; keys h0' = (cos a, sin a, 0), h1' = (cos b, 0, sin b),
    h2' = −e1 (no tangent part at e1). Anchors 0 and 1 see one tangent negative: projected share 1.
    Anchor 2 sees two orthogonal tangents: share w0² sin²a / (w0² sin²a + w1² sin²b)."""
    a, b, tau = 0.7, 1.1, 0.5
    h = np.tile([1.0, 0.0, 0.0], (3, 1))
    hp = np.array([[math.cos(a), math.sin(a), 0.0], [math.cos(b), 0.0, math.sin(b)], [-1.0, 0.0, 0.0]])
    mon = ParadigmMonitor(losses=["infonce"], taus=(tau,), lambdas=(0.1,), sink=None, dtype=np.float64)
    rec = mon.update(0, h, hp)
    e = lambda c: math.exp(c / tau)  # noqa: E731
    w0, w1 = e(math.cos(a)) / (e(math.cos(a)) + e(math.cos(b))), e(math.cos(b)) / (e(math.cos(a)) + e(math.cos(b)))
    share2 = w0**2 * math.sin(a) ** 2 / (w0**2 * math.sin(a) ** 2 + w1**2 * math.sin(b) ** 2)
    assert rec["hardest_share"]["0.5"] == pytest.approx((1 + 1 + share2) / 3, rel=1e-12)
    simple0 = e(math.cos(b)) / (e(math.cos(b)) + e(-1.0))
    simple1 = e(math.cos(a)) / (e(math.cos(a)) + e(-1.0))
    assert rec["weight_share"]["0.5"] == pytest.approx((simple0 + simple1 + w0) / 3, rel=1e-12)
