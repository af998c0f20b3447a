"""The verdict machinery against independent witnesses.

Holm is checked against a loop written here from its definition; the t tests against scipy.stats
(``ttest_rel``, ``ttest_ind(equal_var=False)``, ``ttest_1samp`` and their confidence intervals);
TOST against two one-sided scipy tests written from Schuirmann's definition; the MDE against the
power of the noncentral t; the proportion interval against ``binomtest``. Edge cases: ties, n = 2,
n = 1, zero variance, failed seeds (NaN), and the verdict rules (direction, equivalence, sub-claims,
a reversal on the other split).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from gradlab.experiments.stats import (
    binomial_ci,
    claim_entry,
    combine_verdicts,
    compare,
    decide_claims,
    direction_verdict,
    equivalence,
    equivalence_verdict,
    holm,
    mde,
    one_sample_t,
    paired_t,
    tost,
    welch_t,
)

RNG = np.random.default_rng(20240611)


def holm_by_loop(p):
    """Holm (1979) from its definition: sort, multiply the i-th smallest by (m − i), carry the running max."""
    idx = [i for i, x in enumerate(p) if x is not None and math.isfinite(x)]
    order = sorted(idx, key=lambda i: p[i])
    m = len(order)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


@pytest.mark.parametrize("p", [[0.01, 0.04, 0.03, 0.005], [0.2], [0.5, 0.5, 0.5], [0.001, None, 0.04, math.nan, 0.3],
                               list(RNG.uniform(0, 0.2, 17)), [0.0, 1.0, 0.02]])
def test_holm_matches_the_loop(p):
    assert holm(p) == pytest.approx(holm_by_loop(p), nan_ok=True)


def test_holm_textbook_values_and_monotone():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    p = RNG.uniform(0, 1, 30)
    adj = np.array(holm(p))
    assert np.all(adj >= p) and np.all(adj <= 1)
    order = np.argsort(p)
    assert np.all(np.diff(adj[order]) >= 0)  # step-down keeps the order of the raw p values


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_paired_t_matches_scipy(n):
    a = RNG.normal(70, 1, n)
    b = a + RNG.normal(0.4, 0.7, n)
    r = paired_t(a, b)
    w = sps.ttest_rel(b, a)
    ci = w.confidence_interval(0.95)
    assert r.p == pytest.approx(w.pvalue, rel=1e-10) and r.n == n
    assert r.estimate == pytest.approx(np.mean(b - a))
    assert r.ci95 == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_paired_t_drops_a_failed_seed_from_both_arms():
    a = np.array([1.0, 2.0, np.nan, 4.0, 5.0])
    b = np.array([1.5, 2.1, 3.0, 4.9, np.nan])
    r = paired_t(a, b)
    w = sps.ttest_rel([1.5, 2.1, 4.9], [1.0, 2.0, 4.0])
    assert r.n == 3 and r.p == pytest.approx(w.pvalue)
    with pytest.raises(ValueError, match="one value per seed"):
        paired_t([1.0, 2.0], [1.0])


@pytest.mark.parametrize("na,nb", [(2, 2), (3, 5), (5, 5), (9, 4)])
def test_welch_matches_scipy(na, nb):
    a, b = RNG.normal(0, 1, na), RNG.normal(0.8, 2.5, nb)
    r = welch_t(a, b)
    w = sps.ttest_ind(b, a, equal_var=False)
    ci = w.confidence_interval(0.95)
    assert r.p == pytest.approx(w.pvalue, rel=1e-9)
    assert r.df == pytest.approx(w.df, rel=1e-9)
    assert r.ci95 == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert r.n == min(na, nb)


def test_one_sample_matches_scipy():
    x = RNG.normal(0.3, 0.1, 5)
    r, w = one_sample_t(x, 0.5), sps.ttest_1samp(x, 0.5)
    assert r.p == pytest.approx(w.pvalue) and r.estimate == pytest.approx(x.mean() - 0.5)


def test_degenerate_cases_follow_the_stated_rules():
    same = [70.0, 71.0, 72.0]
    assert paired_t(same, same).p == 1.0 and paired_t(same, same).ci95 == (0.0, 0.0)  # ties: no difference
    shifted = paired_t(same, [x + 0.5 for x in same])  # zero variance of the differences, nonzero shift
    assert shifted.p == 0.0 and shifted.estimate == pytest.approx(0.5)
    assert welch_t([1.0, 1.0], [2.0, 2.0]).p == 0.0 and welch_t([1.0, 1.0], [1.0, 1.0]).p == 1.0
    one = paired_t([1.0], [2.0])  # one seed: an estimate, no test
    assert one.n == 1 and math.isnan(one.p) and math.isnan(mde(one))
    assert math.isnan(paired_t([np.nan], [1.0]).estimate)
    assert math.isnan(welch_t([1.0], [2.0, 3.0]).p)


def tost_by_definition(a, b, margin):
    """Schuirmann's two one-sided tests on the paired differences, each a scipy one-sided t test."""
    d = np.asarray(b) - np.asarray(a)
    p_low = sps.ttest_1samp(d, -margin, alternative="greater").pvalue   # H0: diff <= −margin
    p_high = sps.ttest_1samp(d, margin, alternative="less").pvalue      # H0: diff >= +margin
    return max(p_low, p_high)


@pytest.mark.parametrize("shift,sd,n", [(0.1, 0.3, 5), (0.9, 0.3, 5), (-0.4, 1.0, 2), (0.0, 0.05, 8), (2.0, 0.5, 6)])
def test_tost_matches_two_one_sided_scipy_tests(shift, sd, n):
    a = RNG.normal(70, 1, n)
    b = a + shift + RNG.normal(0, sd, n)
    r = tost(a, b, 1.0)
    assert r.p == pytest.approx(tost_by_definition(a, b, 1.0), rel=1e-9)
    ci90 = sps.ttest_rel(b, a).confidence_interval(0.90)
    assert r.ci95 == pytest.approx((ci90.low, ci90.high), rel=1e-9)  # TOST's own interval is the 90 % one
    assert (r.p < 0.05) == (-1.0 < r.ci95[0] and r.ci95[1] < 1.0)  # equivalence ⇔ 90 % interval inside ±margin
    side = 1.0 if r.estimate >= 0 else -1.0
    d = b - a
    witness = sps.ttest_1samp(side * d, 1.0, alternative="greater").pvalue
    assert r.p_against == pytest.approx(witness, rel=1e-9)


def test_tost_degenerate_and_welch():
    assert tost([1.0, 1.0, 1.0], [1.2, 1.2, 1.2], 1.0).p == 0.0  # zero variance inside the margin
    assert tost([1.0, 1.0, 1.0], [3.0, 3.0, 3.0], 1.0).p == 1.0  # ... outside it
    assert math.isnan(tost([1.0], [1.0], 1.0).p)
    a, b = RNG.normal(0, 0.3, 6), RNG.normal(0.1, 0.3, 7)
    r = tost(a, b, 1.0, paired=False)
    w = sps.ttest_ind(b, a, equal_var=False)
    se = (b.mean() - a.mean()) / w.statistic
    p_low = sps.t.sf((b.mean() - a.mean() + 1.0) / se, w.df)
    p_high = sps.t.cdf((b.mean() - a.mean() - 1.0) / se, w.df)
    assert r.p == pytest.approx(max(p_low, p_high), rel=1e-9) and "Welch" in r.test
    with pytest.raises(ValueError, match="margin"):
        tost(a, b, 0.0)


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_mde_has_the_stated_power_by_simulation(n):
    """Draw many experiments whose true paired effect is the MDE at sd σ: 80 % of them must reject."""
    sigma = 0.7
    r = paired_t(np.zeros(n), RNG.normal(0, sigma, n))
    effect = mde(r) / r.se * sigma / math.sqrt(n)  # the MDE at the true standard error σ/√n
    d = RNG.normal(effect, sigma, (40_000, n))
    rejected = sps.ttest_1samp(d, 0.0, axis=1).pvalue < 0.05
    assert rejected.mean() == pytest.approx(0.8, abs=0.012)


def test_binomial_interval_matches_scipy():
    for k, n in ((11, 22), (0, 10), (10, 10), (3, 40)):
        ci = sps.binomtest(k, n).proportion_ci(method="exact")
        assert binomial_ci(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_verdict_words():
    assert direction_verdict(1.0, 0.01, expect=+1) == "reproduced"
    assert direction_verdict(1.0, 0.01, expect=-1) == "contradicted"
    assert direction_verdict(1.0, 0.05, expect=+1) == "inconclusive"  # the boundary is not significant
    assert direction_verdict(math.nan, 0.01, expect=+1) == "not tested"
    assert equivalence_verdict(0.01, 1.0) == "reproduced"
    assert equivalence_verdict(0.3, 0.01) == "contradicted"
    assert equivalence_verdict(0.3, 0.2) == "inconclusive"
    assert combine_verdicts(["reproduced", "contradicted"]) == "partial"
    assert combine_verdicts(["inconclusive", "inconclusive"]) == "inconclusive"
    assert combine_verdicts(["not tested", "reproduced"]) == "partial"
    with pytest.raises(ValueError):
        combine_verdicts(["not reproduced"])


def test_entry_is_oriented_in_the_papers_direction():
    a, b = [3.0, 2.0, 4.0, 5.0, 4.5], [2.0, 1.5, 3.0, 4.1, 3.2]
    e = claim_entry(paired_t(a, b), expect=-1)
    r = paired_t(a, b)
    assert e["estimate"] == pytest.approx(-r.estimate) and e["ci95"] == pytest.approx([-r.ci95[1], -r.ci95[0]])
    assert e["p"] == r.p and e["mde"] == pytest.approx(mde(r))


def test_decide_claims_uses_holm_over_every_test_on_the_page():
    up = list(np.arange(5.0))
    strong = compare(up, [x + 1 + 0.1 * i for i, x in enumerate(up)], expect=+1, split="test")   # p tiny
    weak_p = 0.03
    weak = {"kind": "direction", "estimate": 0.5, "ci95": [0.1, 0.9], "p": weak_p, "n": 5, "mde": 0.6}
    claims = [{"id": "a", **strong}, {"id": "b", **weak}, {"id": "c", **weak}, {"id": "d", "kind": "descriptive"}]
    out = decide_claims(claims)
    assert [c["verdict"] for c in out] == ["reproduced", "inconclusive", "inconclusive", "descriptive"]
    assert out[1]["p_holm"] == pytest.approx(holm_by_loop([strong["p"], weak_p, weak_p])[1])
    assert out[3]["p_holm"] is None and "verdict" not in claims[0]  # the input is left alone
    alone = decide_claims([{"id": "b", **weak}])
    assert alone[0]["verdict"] == "reproduced"  # the same test, alone on its page


def test_a_significant_reversal_on_the_other_split_makes_it_partial():
    a = [70.0, 71.0, 72.0, 73.0, 74.0]
    b = [71.0, 72.1, 72.9, 74.2, 75.0]
    reversed_other = (a, [x - 1 - 0.05 * i for i, x in enumerate(a)])
    e = compare(a, b, expect=+1, split="dev", other=reversed_other, other_split="test")
    assert decide_claims([e])[0]["verdict"] == "partial"
    agree = compare(a, b, expect=+1, split="dev", other=(a, b), other_split="test")
    assert decide_claims([agree])[0]["verdict"] == "reproduced"


def test_composite_claims_and_equivalence_contradicted():
    a = [70.0, 71.0, 72.0, 73.0, 74.0]
    better = [x + 1 + 0.01 * i for i, x in enumerate(a)]
    worse = [x - 1 - 0.01 * i for i, x in enumerate(a)]
    comp = {"kind": "composite", "subclaims": [compare(a, better, expect=+1, split="dev", name="beats 1"),
                                               compare(a, worse, expect=+1, split="dev", name="beats 2")]}
    (out,) = decide_claims([comp])
    assert [s["verdict"] for s in out["subclaims"]] == ["reproduced", "contradicted"] and out["verdict"] == "partial"
    far = [x + 3 + 0.01 * i for i, x in enumerate(a)]
    assert decide_claims([equivalence(a, far, split="test")])[0]["verdict"] == "contradicted"
    near = [x + 0.05 * (-1) ** i for i, x in enumerate(a)]
    assert decide_claims([equivalence(a, near, split="test")])[0]["verdict"] == "reproduced"
    with pytest.raises(ValueError, match="unknown kind"):
        decide_claims([{"id": "x", "kind": "nonsense"}])
