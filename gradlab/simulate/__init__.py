"""The Monte-Carlo engine of Li et al. 2024 Sec. 3.1 (protocol in App. A.1; docs/formulas.md §5–6).

Angles: θ_ii' ~ N(μ_pos, σ_pos²) (one positive) and θ_ij' ~ N(μ_neg, σ_neg²) (N − 1
negatives) per batch, B batches per (μ_pos, μ_neg) cell of a G_pos × G_neg grid.

Public API (every statistic returns a ``gradlab.io.Result``; ``loss`` is a registry name
or a ``gradlab.Loss``; ``progress`` is an optional ``callable(done, total)``; the library
never prints)::

    Protocol(grid=100, mu_pos_range=(π/20, π/2), mu_neg_range=(π/20, π), sigma_pos=0.05,
             sigma_neg=0.10, batches=1000, batch_size=128, law="normal" | "reflected",
             mode="common" | "independent", seed=0, dtype="float32", chunk=None)
        .mu_pos, .mu_neg (NumPy axes, both ends included), .replace(**changes), .to_dict()

    gd_map(loss, protocol=Protocol(), *, exact=False, progress=None) -> Result
        dims (mu_pos, mu_neg): mean GD per cell and its standard error (Figs. 2, 10).
        exact=True: quadrature (MPT, MET, MAT only), stderr None.
    weight_share(protocol=Protocol(), *, taus=(0.3, 0.1, 0.05, 0.03, 0.01, 0.005),
                 mu_pos=π/6, loss="infonce", gd_gate=None, progress=None) -> Result
        dims (tau, mu_neg): mean share of the hardest negative in the weight (Fig. 3);
        gd_gate=g skips batches with GD < g; mask = no batch passed (mean/stderr NaN there);
        extra "passed" (fraction of batches that passed).
    ratio_map(loss, protocol=Protocol(), *, gd_threshold=0.05, progress=None) -> Result
        dims (mu_pos, mu_neg): mean effective ratio Σ_j W_j R_j / Σ_j W_j (Fig. 4);
        mask = μ_pos > μ_neg or mean GD < gd_threshold; extra "gd".
    lemma1_map(protocol=Protocol(), *, lam=0.1, ratios=(1, 1.25, 1.5, 1.75, 2),
               alpha_law="uniform", progress=None) -> Result
        dims (mu_pos, mu_neg): mean minimum ratio r_low over feasible batches (hardest
        negative, α ~ alpha_law); mask = no feasible batch; extra "feasible" (fraction),
        "satisfied" (r, mu_pos, mu_neg): fraction with r_low <= r <= r_high; axis "r";
        "sphere_closer", "sphere_disagree" (r, mu_pos, mu_neg): the step taken on the sphere.
    min_ratio_distribution(protocol=Protocol(), *, lams=(0.01, 0.1, 0.5, 1.0),
                           mu_pos=π/6, mu_neg=π/3, bins=..., alpha_law="uniform",
                           return_samples=False) -> Result
        dims (lam,): mean minimum ratio; extra "histogram" (lam, bin) as densities over
        "bin_edges", "quantiles" (lam, q), "feasible" (lam,) (Fig. 8a, simulated).
    quadrature_gd_map(loss, protocol) -> Result   (the exact=True path)
    sample_angles(protocol, mu_pos, mu_neg, *, cell=0) -> (theta_pos (B,), theta_neg (B, N−1))
    FACTORED: the losses with exact factored fast paths in common mode.

Modes. ``common`` (default): one set of standard-normal draws serves every cell
(batch b uses ``fold_in(fold_in(key(seed), COMMON), b)``); each statistic then factors
into a table per (batch, μ_neg) — the log-sum-exp or the hardest cosine of the
negatives — and a term per (batch, μ_pos), so a map costs O(B·N·G + B·G²).
``independent``: cell ``c = i_pos · G_neg + i_neg`` draws from ``fold_in(key(seed), c)``.
Both are bit-for-bit deterministic from the seed whatever ``chunk`` and the device count.

Laws. ``normal``: the paper's law as given; an angle outside [0, π] is read as the
geometric angle it represents (every statistic sees cos θ). ``reflected``: θ folded
into [0, π] (``geometry.fold_angle``). Because cos(fold θ) = cos θ, the two laws give
the same distribution to every statistic of the geometry; they differ in the sampled
angles themselves (``sample_angles``).
"""

from gradlab.simulate._protocol import Protocol as Protocol
from gradlab.simulate._quadrature import quadrature_gd_map as quadrature_gd_map
from gradlab.simulate._sampling import sample_angles as sample_angles
from gradlab.simulate._stats import FACTORED as FACTORED
from gradlab.simulate._stats import gd_map as gd_map
from gradlab.simulate._stats import lemma1_map as lemma1_map
from gradlab.simulate._stats import min_ratio_distribution as min_ratio_distribution
from gradlab.simulate._stats import ratio_map as ratio_map
from gradlab.simulate._stats import weight_share as weight_share

__all__ = [
    "Protocol",
    "gd_map",
    "weight_share",
    "ratio_map",
    "lemma1_map",
    "min_ratio_distribution",
    "quadrature_gd_map",
    "sample_angles",
    "FACTORED",
]
