"""The statistics that decide the studies' verdicts: t tests over seeds, TOST, Holm, the verdict words.

A claim of a paper is decided by one test over the seeds of its arms (or by several named
sub-claims, each a test). Arms that share seeds share the data order, the initialization and
the dropout masks (every run draws them from its seed alone), so two arms of one study are
compared by a **paired t test** over the seeds; a before/after comparison on the same runs is
paired too; Welch's t test is for arms that share nothing. Every test is two-sided, and each p value
is adjusted by Holm's step-down procedure over every tested claim on the page (:func:`holm`).

**Verdicts** (:data:`VERDICTS`), one vocabulary for every claim, defined in
:data:`VERDICT_MEANING` (the write-up renders its definitions from there): reproduced,
contradicted, inconclusive (with the minimum detectable effect, :func:`mde`), partial, not
tested, descriptive.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ALPHA", "POWER", "VERDICTS", "VERDICT_MEANING", "TestResult", "paired_t", "welch_t", "one_sample_t", "tost", "holm",
           "mde", "direction_verdict", "equivalence_verdict", "combine_verdicts", "binomial_ci", "claim_entry",
           "decide_claims", "compare", "equivalence", "EQUIVALENCE_MARGIN"]

#: The margin of the "comparable" claims (Li et al. 2024, Farina et al. 2023, Rho et al. 2023's
#: "marginal" effects): one STS point (Spearman × 100), the spread of a loss's score over seeds here.
EQUIVALENCE_MARGIN = 1.0

#: Every test is two-sided at this level, after Holm's adjustment over the page.
ALPHA = 0.05
#: The power at which :func:`mde` states the minimum detectable effect.
POWER = 0.8
VERDICTS = ("reproduced", "contradicted", "inconclusive", "partial", "not tested", "descriptive")
#: What each verdict means (the write-up's definitions are rendered from here).
VERDICT_MEANING = {
    "reproduced": "Holm-adjusted p < 0.05 in the paper's direction (an equivalence claim: TOST's adjusted p < 0.05, "
                  "the difference within the stated margin)",
    "contradicted": "Holm-adjusted p < 0.05 against the paper's direction (an equivalence claim: the difference "
                    "beyond the margin, one-sided, Bonferroni-adjusted over the page)",
    "inconclusive": "neither; the row states the minimum detectable effect at that n (two-sided α = 0.05, "
                    "80 % power)",
    "partial": "named sub-claims differ, or the paper's split agrees while the other split shows a significant "
               "reversal (unadjusted p < 0.05)",
    "not tested": "no test could decide it (fewer than 2 seeds, a failed arm, or runs still improving at their "
                  "last evaluation)",
    "descriptive": "the paper's statement admits no test (no stated tolerance): intervals shown, never reproduced",
}


@dataclasses.dataclass(frozen=True)
class TestResult:
    """One test over seeds.

    Attributes:
      test: its name (``"paired t"``, ``"Welch t"``, ``"one-sample t"``, ``"TOST (paired t)"``...).
      estimate, ci95, p: the effect (b − a, or x − μ0), its two-sided 95 % interval and p (TOST: its own
        90 % interval and the larger of its two one-sided p values).
      n, se, df: seeds per arm (pairs; Welch: the smaller arm), the standard error, its degrees of freedom.
      p_against, margin: TOST only: the one-sided p that the difference lies beyond the margin; the margin.
    """

    test: str
    estimate: float
    ci95: tuple[float, float]
    p: float
    n: int
    se: float
    df: float
    p_against: float | None = None
    margin: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: NaN as None."""
        def num(x):
            return None if x is None or not math.isfinite(x) else float(x)

        d = {"test": self.test, "estimate": num(self.estimate), "ci95": [num(self.ci95[0]), num(self.ci95[1])],
             "p": num(self.p), "n": int(self.n)}
        if self.margin is not None:
            d.update(margin=float(self.margin), p_against=num(self.p_against), ci_level=0.90)
        return d


def _finite(x: Sequence[float]) -> np.ndarray:
    x = np.asarray(x, float).ravel()
    return x[np.isfinite(x)]


def _t_result(test: str, est: float, se: float, df: float, n: int, level: float = 0.95) -> TestResult:
    """The two-sided t test of ``est`` = 0 with standard error ``se`` and ``df`` degrees of freedom."""
    from scipy.stats import t as student

    if n < 2 or not math.isfinite(est) or not math.isfinite(df) or df <= 0:
        return TestResult(test, est, (math.nan, math.nan), math.nan, n, math.nan, df)
    if se == 0:  # every seed agrees exactly: the effect is known without error
        return TestResult(test, est, (est, est), 1.0 if est == 0 else 0.0, n, 0.0, df)
    half = float(student.ppf(0.5 + level / 2, df)) * se
    p = float(2 * student.sf(abs(est) / se, df))
    return TestResult(test, est, (est - half, est + half), p, n, se, df)


def paired_t(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Paired t test of b − a over the seeds both arms finished (position i is seed i in both).

    Zero variance of the differences: p = 0 for a nonzero difference, 1 for none.

    Examples:
      >>> paired_t([0.0, 0.0], [1.0, 1.0]).p
      0.0
    """
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired arms need one value per seed in each; got {a.size} and {b.size}")
    d = (b - a)[np.isfinite(a) & np.isfinite(b)]
    n = int(d.size)
    if n == 0:
        return TestResult("paired t", math.nan, (math.nan, math.nan), math.nan, 0, math.nan, math.nan)
    est = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return _t_result("paired t", est, se, n - 1.0, n)


def one_sample_t(x: Sequence[float], mu: float = 0.0) -> TestResult:
    """One-sample t test of mean(x) − mu over the seeds.

    Examples:
      >>> round(one_sample_t([0.4, 0.5, 0.45], 0.5).estimate, 3)
      -0.05
    """
    x = _finite(x)
    r = paired_t(np.full(x.size, float(mu)), x)
    return dataclasses.replace(r, test="one-sample t")


def welch_t(a: Sequence[float], b: Sequence[float]) -> TestResult:
    """Welch's t test of mean(b) − mean(a) (unequal variances, Welch–Satterthwaite df).

    Both arms constant: p = 0 for different constants, 1 for equal ones.
    """
    a, b = _finite(a), _finite(b)
    n = int(min(a.size, b.size))
    if a.size == 0 or b.size == 0:
        return TestResult("Welch t", math.nan, (math.nan, math.nan), math.nan, n, math.nan, math.nan)
    est = float(b.mean() - a.mean())
    if a.size < 2 or b.size < 2:
        return TestResult("Welch t", est, (math.nan, math.nan), math.nan, n, math.nan, math.nan)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return _t_result("Welch t", est, 0.0, a.size + b.size - 2.0, n)
    df = (va + vb) ** 2 / ((va ** 2 / (a.size - 1) if va else 0.0) + (vb ** 2 / (b.size - 1) if vb else 0.0))
    return _t_result("Welch t", est, se, df, n)


def tost(a: Sequence[float], b: Sequence[float], margin: float, *, paired: bool = True) -> TestResult:
    """Two one-sided tests that b − a lies within ±margin (Schuirmann 1987), paired or Welch.

    ``p`` is the larger of the two one-sided p values (equivalence at level α when p < α, i.e. the
    90 % interval inside ±margin); ``ci95`` holds that 90 % interval. ``p_against`` is the one-sided
    p that the difference lies beyond the margin on the side of the estimate (the test that
    contradicts equivalence).

    Examples:
      >>> r = tost([70.0, 71.0, 72.0, 71.5, 70.5], [70.1, 71.2, 71.9, 71.4, 70.6], margin=1.0)
      >>> r.p < 0.05, r.ci95[0] > -1.0
      (True, True)
    """
    from scipy.stats import t as student

    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a finite number > 0; got {margin!r}")
    base = paired_t(a, b) if paired else welch_t(a, b)
    name = f"TOST ({base.test}), margin ±{margin:g}"
    est, se, df, n = base.estimate, base.se, base.df, base.n
    if n < 2 or not math.isfinite(est):
        return TestResult(name, est, (math.nan, math.nan), math.nan, n, se, df, math.nan, float(margin))
    if se == 0:
        inside = abs(est) < margin
        return TestResult(name, est, (est, est), 0.0 if inside else 1.0, n, 0.0, df, 1.0 if inside else 0.0,
                          float(margin))
    p_low = float(student.sf((est + margin) / se, df))  # H0: diff <= -margin
    p_high = float(student.cdf((est - margin) / se, df))  # H0: diff >= +margin
    q = float(student.ppf(0.95, df)) * se
    against = float(student.sf((abs(est) - margin) / se, df))  # H0: |diff| <= margin on the estimate's side
    return TestResult(name, est, (est - q, est + q), max(p_low, p_high), n, se, df, against, float(margin))


def holm(p: Sequence[float | None]) -> list[float]:
    """Holm's step-down adjusted p values (NaN / None are not tests: they stay NaN and do not count).

    The i-th smallest of m p values becomes max_{j ≤ i} min(1, (m − j + 1) p_(j)).

    Examples:
      >>> [round(p, 3) for p in holm([0.01, 0.04, 0.03])]
      [0.03, 0.06, 0.06]
    """
    p = np.array([math.nan if x is None else float(x) for x in p], float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out.tolist()
    order = idx[np.argsort(p[idx], kind="stable")]
    adjusted = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adjusted)
    return out.tolist()


def mde(result: TestResult, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true effect that a two-sided t test of this n and spread detects with ``power``:
    δ = λ × se, λ the noncentrality at which the test (its df) rejects at level α with that probability,
    the power E_V[Φ̄(c √(V/df) − λ) + Φ(−c √(V/df) − λ)] over V ~ χ²(df) integrated numerically (NaN
    without a standard error)."""
    from scipy.integrate import quad
    from scipy.optimize import brentq
    from scipy.stats import chi2, norm
    from scipy.stats import t as student

    if not (math.isfinite(result.se) and math.isfinite(result.df) and result.df > 0):
        return math.nan
    df, crit = result.df, float(student.ppf(1 - alpha / 2, result.df))

    def shortfall(lam: float) -> float:
        def integrand(v: float) -> float:
            c = crit * math.sqrt(v / df)
            return (norm.sf(c - lam) + norm.cdf(-c - lam)) * chi2.pdf(v, df)

        return quad(integrand, 0.0, math.inf, limit=200)[0] - power

    hi = crit + 1.0
    while shortfall(hi) < 0:  # widen until the power is reached (λ ≈ crit + z_power for large df)
        hi *= 2
    return float(brentq(shortfall, 0.0, hi) * result.se)


def direction_verdict(estimate: float, p_adjusted: float, *, expect: int, alpha: float = ALPHA) -> str:
    """reproduced / contradicted / inconclusive / not tested for a claim that the effect has sign ``expect``.

    Examples:
      >>> direction_verdict(-1.2, 0.01, expect=+1), direction_verdict(0.3, 0.2, expect=+1)
      ('contradicted', 'inconclusive')
    """
    if expect not in (1, -1):
        raise ValueError(f"expect is +1 or -1; got {expect!r}")
    if not (math.isfinite(estimate) and math.isfinite(p_adjusted)):
        return "not tested"
    if p_adjusted < alpha and estimate != 0:
        return "reproduced" if estimate * expect > 0 else "contradicted"
    return "inconclusive"


def equivalence_verdict(p_adjusted: float, p_against_adjusted: float, *, alpha: float = ALPHA) -> str:
    """reproduced (TOST's adjusted p < α) / contradicted (beyond the margin, adjusted p < α) / inconclusive."""
    if not math.isfinite(p_adjusted):
        return "not tested"
    if p_adjusted < alpha:
        return "reproduced"
    if math.isfinite(p_against_adjusted) and p_against_adjusted < alpha:
        return "contradicted"
    return "inconclusive"


def combine_verdicts(verdicts: Sequence[str]) -> str:
    """One claim's verdict from its named sub-claims: the common verdict, ``partial`` when they differ.

    Examples:
      >>> combine_verdicts(["reproduced", "reproduced"]), combine_verdicts(["reproduced", "inconclusive"])
      ('reproduced', 'partial')
    """
    verdicts = list(verdicts)
    for v in verdicts:
        if v not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {v!r}")
    if not verdicts:
        return "not tested"
    tested = [v for v in verdicts if v != "not tested"]
    if not tested:
        return "not tested"
    if len(set(tested)) == 1 and len(tested) == len(verdicts):
        return tested[0]
    return "partial"


def binomial_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Clopper–Pearson interval of a proportion k / n.

    Examples:
      >>> [round(x, 3) for x in binomial_ci(11, 22)]
      [0.282, 0.718]
    """
    from scipy.stats import beta

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0; got k={k}, n={n}")
    a = 1 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def claim_entry(result: TestResult, *, expect: int = 1, split: str = "", name: str = "",
               other: TestResult | None = None, other_split: str = "") -> dict[str, Any]:
    """A tested (sub-)claim as the claims record it: the test's numbers with ``estimate`` and ``ci95``
    turned into the paper's direction (``expect`` = −1 flips them), its MDE, and the other split's test.

    An equivalence test (TOST) keeps its sign: its paper's direction is "within the margin".

    Examples:
      >>> e = claim_entry(paired_t([3.0, 2.0, 4.0], [2.0, 1.5, 3.0]), expect=-1, split="dev")
      >>> e["kind"], round(e["estimate"], 3), e["ci95"][0] < e["estimate"] < e["ci95"][1]
      ('direction', 0.833, True)
    """
    d = result.to_dict()
    if result.margin is not None:
        d.update(kind="equivalence")
    else:
        if expect not in (1, -1):
            raise ValueError(f"expect is +1 or -1; got {expect!r}")
        lo, hi = d["ci95"]
        if expect == -1:
            d["estimate"] = None if d["estimate"] is None else -d["estimate"]
            lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
        d.update(kind="direction", ci95=[lo, hi], expect=expect)
        m = mde(result)
        d["mde"] = None if not math.isfinite(m) else m
    d.update(split=split)
    if name:
        d["name"] = name
    if other is not None:
        o = claim_entry(other, expect=expect, split=other_split)
        d["other_split"] = {k: o[k] for k in ("split", "estimate", "ci95", "p", "n", "test")}
    return d


def _entry_verdict(e: dict[str, Any], p_adj: float, p_against_adj: float) -> str:
    if e["kind"] == "equivalence":
        return equivalence_verdict(p_adj, p_against_adj)
    est = math.nan if e.get("estimate") is None else e["estimate"]
    verdict = direction_verdict(est, p_adj, expect=1)
    other = e.get("other_split")
    if other and other.get("p") is not None and other["p"] < ALPHA and other.get("estimate") is not None:
        if (verdict == "reproduced" and other["estimate"] < 0) or (verdict == "contradicted" and other["estimate"] > 0):
            verdict = "partial"  # the other split reverses it significantly
    return verdict


def decide_claims(claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims with ``p_holm`` and ``verdict`` set by Holm over every test among them.

    A claim is ``{"kind": "direction" | "equivalence", ...claim_entry fields}``, or ``{"kind":
    "composite", "subclaims": [test entries]}`` (each sub-claim is one test of the family; the claim's
    verdict is :func:`combine_verdicts` of theirs, its numbers those of the sub-claim with the largest
    adjusted p), or ``{"kind": "not tested" | "descriptive"}`` (no test: no p_holm). An equivalence
    claim's ``p_against`` is Bonferroni-adjusted over the family (m × p, at most 1). Returns new dicts;
    the input is not changed.
    """
    out = [dict(c, subclaims=[dict(s) for s in c["subclaims"]]) if c.get("kind") == "composite" else dict(c)
           for c in claims]
    tests = [e for c in out for e in (c["subclaims"] if c.get("kind") == "composite" else [c])
             if e.get("kind") in ("direction", "equivalence")]
    adjusted = holm([e.get("p") for e in tests])
    m = sum(1 for e in tests if e.get("p") is not None and math.isfinite(e["p"]))
    for e, p_adj in zip(tests, adjusted, strict=True):
        e["p_holm"] = None if not math.isfinite(p_adj) else p_adj
        against = e.get("p_against")
        p_against_adj = math.nan if against is None else min(1.0, m * against)
        e["verdict"] = _entry_verdict(e, p_adj, p_against_adj)
    for c in out:
        kind = c.get("kind")
        if kind == "composite":
            subs = c["subclaims"]
            c["verdict"] = combine_verdicts([s["verdict"] for s in subs])
            binding = max(subs, key=lambda s: -1.0 if s.get("p_holm") is None else s["p_holm"])
            for k in ("estimate", "ci95", "p", "p_holm", "n", "test", "split"):
                c[k] = binding.get(k)
        elif kind in ("not tested", "descriptive"):
            c["verdict"], c["p_holm"] = kind, None
        elif kind not in ("direction", "equivalence"):
            raise ValueError(f"claim {c.get('id')!r}: unknown kind {kind!r}")
    return out


def compare(a: Sequence[float], b: Sequence[float], *, expect: int, split: str, other: tuple | None = None,
            other_split: str = "", paired: bool = True, name: str = "") -> dict[str, Any]:
    """The test entry of the claim that b − a has sign ``expect`` on ``split`` (paired t when the arms share
    seeds, else Welch), with ``other`` = (a, b) on ``other_split`` as the split that can only downgrade it."""
    test = paired_t if paired else welch_t
    return claim_entry(test(a, b), expect=expect, split=split, name=name,
                      other=None if other is None else test(*other), other_split=other_split)


def equivalence(a: Sequence[float], b: Sequence[float], *, split: str, margin: float = EQUIVALENCE_MARGIN,
                paired: bool = True, name: str = "") -> dict[str, Any]:
    """The test entry of the claim that b and a are comparable: TOST within ±``margin``."""
    return claim_entry(tost(a, b, margin, paired=paired), split=split, name=name)
