"""Ineffective objectives (Li et al. 2024 Sec. 4, Table 2 upper part, App. D.2; Nie et al. 2023 Sec. 2.2; Farina et al. 2023).

Alignment, uniformity and their combinations, alignment + ν·MHE / ν·MHS, Barlow Twins
(Li et al. 2024's ℓ2 form and Farina et al. 2023's Pearson form) and VICReg (Li et al. 2024's and Farina et al. 2023's
forms). All functions take unit rows ``h``, ``hp`` of shape (N, D).

Conventions (see docs/losses.md):

* ``alignment`` and ``align_mhs`` are per-anchor losses: ``components`` describes
  ∂L_i/∂h_i with every other embedding fixed.
* Every other objective here is batch-level: ``components`` describes ∂L/∂h_i of the
  batch objective L.
* Pure alignment has no negatives: its pull on h_i' is carried by ``Components.pull``.
  Where a pull coexists with weights, it is put into the ratio R = pull / Σ_j W_j
  (the paper's Table 2 convention); only where Σ_j W_j vanishes (ν = 0, λ = 0) does it
  stay in ``pull``. Both representations give the same ``reconstruct``.
* Li et al. 2024's VICReg decomposition (Table 2) is approximate; so is every paradigm form of
  Farina et al. 2023's Barlow Twins and VICReg: their gradients leave the span of
  {P h_j}_{j≠i} ∪ {P h_i'} (per-dimension scalings by variances). Their specs carry
  ``exact=False``; ``gradlab.decompose`` reports the residual.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gradlab.geometry import cosine_matrix, distance_from_cos, safe_sqrt, tangent_project
from gradlab.losses._ops import (
    hardest,
    hardest_cos,
    log_mean_gaussian,
    masked_lse_all,
    offdiag,
    pair_softmax,
    sq_dist_pos,
)
from gradlab.losses._registry import LossSpec, register
from gradlab.paradigm import Components, fit_paradigm

__all__ = [
    "alignment_per_anchor",
    "alignment_coefficient",
    "uniformity_batch",
    "mhe_uniformity",
    "barlow_twins_batch",
    "barlow_twins_pearson_batch",
    "vicreg_batch",
    "vicreg_nc_batch",
]


# --- shared helpers ------------------------------------------------------------------
def _resolved(d2):
    """d² > 16 ε²: the two unit rows differ by more than rounding (‖h − h'‖ > 4ε).

    Below that, h_i and h_i' are the same point up to rounding: the direction of
    h_i − h_i' is noise, and for α < 2 the factor ‖h_i − h_i'‖^{α−2} would blow that
    noise up. Such pairs are treated as identical (zero gradient).
    """
    eps = jnp.finfo(d2.dtype).eps
    return d2 > 16.0 * eps * eps


def alignment_per_anchor(h, hp, alpha):
    """‖h_i − h_i'‖^α, (N,) (Nie et al. 2023 Eq. 3), with a zero gradient where h_i = h_i' (up to rounding)."""
    d2 = sq_dist_pos(h, hp)
    pos = _resolved(d2)
    return jnp.where(pos, jnp.power(jnp.where(pos, d2, 1.0), 0.5 * alpha), 0.0)


def alignment_coefficient(h, hp, alpha):
    """α ‖h_i − h_i'‖^{α−2}, (N,): the coefficient of −h_i' in ∂‖h_i − h_i'‖^α/∂h_i.

    Set to 0 where h_i = h_i' up to rounding (there the tangential gradient is 0).
    """
    d2 = sq_dist_pos(h, hp)
    pos = _resolved(d2)
    return jnp.where(pos, alpha * jnp.power(jnp.where(pos, d2, 1.0), 0.5 * alpha - 1.0), 0.0)


def _ratio_or_pull(pull, weight):
    """Split a total pull coefficient (N,) into R = pull / Σ_j W_j, or keep it as ``pull``.

    Returns (ratio (N, 1), pull (N,)). The ratio form is used wherever Σ_j W_j is not
    negligible next to the pull (|Σ_j W_j| · 1e30 > |pull|); elsewhere (ν = 0, λ = 0)
    the pull stays explicit. ``reconstruct`` gives the same gradient either way.
    """
    wsum = jnp.sum(weight, axis=-1)
    ok = jnp.abs(wsum) * 1e30 > jnp.abs(pull)
    ratio = jnp.where(ok, pull / jnp.where(ok, wsum, 1.0), 0.0)
    return ratio[:, None], jnp.where(ok, 0.0, pull)


def _components(weight, pull, negatives, dtype):
    n = weight.shape[0]
    ratio, rest = _ratio_or_pull(pull, weight)
    return Components(jnp.ones((n,), dtype), weight, ratio, rest, negatives)


def _least_squares_components(batch_fn, h, hp, negatives="h", **p):
    """Nearest paradigm form of ∂L/∂h_i: least-squares fit on {P n_j}_{j≠i} ∪ {−P h_i'}.

    Used where no closed-form decomposition exists (Farina et al. 2023's Pearson Barlow Twins).
    The fit is unique for D > N; for D ≤ N ``lstsq`` returns the minimum-norm fit.
    """
    g = tangent_project(h, jax.grad(lambda x: batch_fn(x, hp, **p))(h))
    coef, _ = fit_paradigm(g, h, hp, negatives)
    weight = jnp.where(jnp.eye(h.shape[0], dtype=bool), 0.0, coef)
    return _components(weight, jnp.diagonal(coef), negatives, h.dtype)


# --- alignment (Nie et al. 2023 Eq. 3; Li et al. 2024 L^a for alpha = 2) ------------------------------
def alignment_components(h, hp, *, alpha):
    n = h.shape[0]
    return Components(
        jnp.ones((n,), h.dtype),
        jnp.zeros((n, n), h.dtype),
        jnp.ones((n, 1), h.dtype),
        alignment_coefficient(h, hp, alpha),
        "h_prime",
    )


def _alignment(h, hp, *, alpha):
    return alignment_per_anchor(h, hp, alpha)


# --- uniformity (Nie et al. 2023 Eq. 4 and App. C: cross-view pairs i ≠ j) ----------------------
def uniformity_batch(h, hp, *, t):
    """log (1/(N(N−1))) Σ_i Σ_{j≠i} exp(−t ‖h_i − h_j'‖²)  (Nie et al. 2023 App. C)."""
    return log_mean_gaussian(h, hp, t, "k≠l")


def _uniformity_weight(h, hp, t):
    """W_ij = 2t exp(−t‖h_i − h_j'‖²) / Σ_{k≠l} exp(−t‖h_k − h_l'‖²), (N, N)."""
    n = h.shape[0]
    logits = -t * (2.0 - 2.0 * cosine_matrix(h, hp))
    return 2.0 * t * pair_softmax(logits, offdiag(n))


def uniformity_components(h, hp, *, t):
    n = h.shape[0]
    return Components(
        jnp.ones((n,), h.dtype),
        _uniformity_weight(h, hp, t),
        jnp.zeros((n, 1), h.dtype),
        None,
        "h_prime",
    )


# --- alignment & uniformity (Nie et al. 2023 Eq. 2) ------------------------------------------
def align_uniform_batch(h, hp, *, lam, alpha, t):
    """(1 − λ) mean_i ‖h_i − h_i'‖^α + λ L_uniform(t)."""
    return (1.0 - lam) * jnp.mean(alignment_per_anchor(h, hp, alpha)) + lam * uniformity_batch(
        h, hp, t=t
    )


def align_uniform_components(h, hp, *, lam, alpha, t):
    n = h.shape[0]
    weight = lam * _uniformity_weight(h, hp, t)
    pull = (1.0 - lam) * alignment_coefficient(h, hp, alpha) / n
    return _components(weight, pull, "h_prime", h.dtype)


# --- alignment + ν·MHE (Li et al. 2024 Sec. 4, App. D.2 Eqs. 7-8, Table 2) ---------------------
def mhe_uniformity(h, tau=0.5):
    """L^{u,MHE} = log (2/(N(N−1))) Σ_{k<l} exp(−‖h_k − h_l‖²/(2τ)), same view.

    τ = 1/2 is Li et al. 2024's MHE (Sec. 4); other τ give the tempered form of mMHE (App. E).
    """
    return log_mean_gaussian(h, h, 1.0 / (2.0 * tau), "k<l")


def align_mhe_batch(h, hp, *, nu):
    return jnp.mean(sq_dist_pos(h, hp)) + nu * mhe_uniformity(h)


def align_mhe_components(h, hp, *, nu):
    """W_ij = 2ν e^{2 h_i·h_j} / Σ_{k<l} e^{2 h_k·h_l}; R = Σ_{k<l} e^{2h_k·h_l} / (ν N Σ_{k≠i} e^{2 h_i·h_k})."""
    n = h.shape[0]
    upper = jnp.triu(jnp.ones((n, n), dtype=bool), k=1)
    logits = 2.0 * cosine_matrix(h, h)
    lse = masked_lse_all(logits, upper)
    off = offdiag(n)
    weight = jnp.where(off, 2.0 * nu * jnp.exp(jnp.where(off, logits, 0.0) - lse), 0.0)
    pull = jnp.full((n,), 2.0 / n, h.dtype)
    return _components(weight, pull, "h", h.dtype)


# --- alignment + ν·MHS (Li et al. 2024 Sec. 4, App. D.2 Eq. 9, Table 2) ------------------------
def align_mhs_per_anchor(h, hp, *, nu):
    """L_i = ‖h_i − h_i'‖²/N − ν min_{j≠i} ‖h_i − h_j‖ (per anchor; see docs/losses.md)."""
    n = h.shape[0]
    nearest = hardest_cos(cosine_matrix(h, h), offdiag(n))
    return sq_dist_pos(h, hp) / n - nu * distance_from_cos(nearest)


def align_mhs_components(h, hp, *, nu):
    """W_j = ν/‖h_i − h_j‖ for the nearest same-view j, else 0; R = 2‖h_i − h_j‖/(νN)."""
    n = h.shape[0]
    c = cosine_matrix(h, h)
    off = offdiag(n)
    d = distance_from_cos(c)
    pos = d > 0
    weight = jnp.where(pos, hardest(c, off) * nu / jnp.where(pos, d, 1.0), 0.0)
    weight = jnp.where(off, weight, 0.0)
    pull = jnp.full((n,), 2.0 / n, h.dtype)
    return _components(weight, pull, "h", h.dtype)


# --- Barlow Twins, Li et al. 2024's l2 form (Sec. 4, App. D.2 Eq. 10) ---------------------------
def barlow_twins_batch(h, hp, *, nu):
    """Σ_k (C_kk − 1)² + ν Σ_{k≠l} C_kl², C = (1/N) Σ_i h_i h_i'ᵀ."""
    n = h.shape[0]
    c = h.T @ hp / n
    on = jnp.diagonal(c)
    return jnp.sum(jnp.square(on - 1.0)) + nu * (jnp.sum(jnp.square(c)) - jnp.sum(jnp.square(on)))


def barlow_twins_components(h, hp, *, nu):
    """W_ij = 2ν h_i'·h_j'/N²; R_i = N A / (ν Σ_{k≠i} h_i'·h_k'), A = I − (1−ν) diag(C).

    R_i is diagonal and is returned as its diagonal, (N, D) (``ratio_diagonal``): N · D
    floats, not N · D² (at N = 256, D = 8192 that is 8 MB instead of 69 GB).
    R_i is undefined (division by zero) where Σ_{k≠i} h_i'·h_k' = 0 exactly.
    """
    n, d = h.shape
    off = offdiag(n)
    gram = cosine_matrix(hp, hp)
    weight = jnp.where(off, 2.0 * nu * gram / n**2, 0.0)
    s = jnp.sum(jnp.where(off, gram, 0.0), axis=-1)
    c_diag = jnp.sum(h * hp, axis=0) / n  # diag C, without forming the D×D C
    a = 1.0 - (1.0 - nu) * c_diag  # the diagonal of A
    ratio = (n / (nu * s))[:, None] * a[None, :]  # (N, D): R_i = diag(ratio[i])
    return Components(jnp.ones((n,), h.dtype), weight, ratio, None, "h", ratio_diagonal=True)


# --- Barlow Twins, Farina et al. 2023's Pearson form (Eq. 2) -----------------------------------
def _standardize(x):
    """Per-dimension batch standardization (population std); a constant column maps to 0."""
    mu = jnp.mean(x, axis=0, keepdims=True)
    xc = x - mu
    var = jnp.mean(jnp.square(xc), axis=0, keepdims=True)
    pos = var > 0
    return xc / jnp.where(pos, jnp.sqrt(jnp.where(pos, var, 1.0)), 1.0)


def pearson_correlation(h, hp):
    """ρ_kl: Pearson correlation of dimension k of view A with dimension l of view B, (D, D)."""
    return _standardize(h).T @ _standardize(hp) / h.shape[0]


def barlow_twins_pearson_batch(h, hp, *, lambda_bt):
    """Σ_k (1 − ρ_kk)² + λ_BT Σ_{k≠l} ρ_kl²  (Farina et al. 2023 Eq. 2)."""
    rho = pearson_correlation(h, hp)
    on = jnp.diagonal(rho)
    return jnp.sum(jnp.square(1.0 - on)) + lambda_bt * (
        jnp.sum(jnp.square(rho)) - jnp.sum(jnp.square(on))
    )


def barlow_twins_pearson_components(h, hp, *, lambda_bt):
    return _least_squares_components(barlow_twins_pearson_batch, h, hp, "h", lambda_bt=lambda_bt)


# --- VICReg, Li et al. 2024's form (Sec. 4; App. D.2 Eq. 11; Table 2) -------------------------
def _covariance(x):
    """Centred sample covariance (1/(N−1)) Σ_i (x_i − x̄)(x_i − x̄)ᵀ, (D, D)."""
    xc = x - jnp.mean(x, axis=0, keepdims=True)
    return xc.T @ xc / (x.shape[0] - 1)


def _offdiag_sq_sum(c):
    return jnp.sum(jnp.square(c)) - jnp.sum(jnp.square(jnp.diagonal(c)))


def vicreg_batch(h, hp, *, nu1, nu2, gamma):
    """L^a + ν1 (v(h) + v(h')) + ν2 (c(h) + c(h')) with Li et al. 2024's v (covariance) and c (variance hinge).

    v(x) = (1/D) Σ_{k≠l} Cov(x)_kl², c(x) = (1/D) Σ_k max(0, γ − σ_k(x)), σ the sample std.
    """
    d = h.shape[1]

    def v(x):
        return _offdiag_sq_sum(_covariance(x)) / d

    def c(x):
        sigma = safe_sqrt(jnp.diagonal(_covariance(x)))
        return jnp.sum(jax.nn.relu(gamma - sigma)) / d

    align = jnp.mean(sq_dist_pos(h, hp))
    return align + nu1 * (v(h) + v(hp)) + nu2 * (c(h) + c(hp))


def vicreg_components(h, hp, *, nu1, nu2, gamma):
    """Table 2 (approximate): W_ij = 4ν1 h_i·h_j/(D(N−1)²), R = D(N−1)²/(2Nν1 Σ_{k≠i} h_i·h_k)."""
    del nu2, gamma  # the variance hinge has no place in Table 2's decomposition
    n, d = h.shape
    off = offdiag(n)
    weight = jnp.where(off, 4.0 * nu1 * cosine_matrix(h, h) / (d * (n - 1) ** 2), 0.0)
    pull = jnp.full((n,), 2.0 / n, h.dtype)
    return _components(weight, pull, "h", h.dtype)


# --- VICReg, Farina et al. 2023's form (Eq. 3) -------------------------------------------------
def vicreg_nc_batch(h, hp, *, lambda_i, lambda_v, lambda_c, eps):
    """(λ_I/N) Σ_n ‖h_n − h_n'‖² + (λ_V/D) Σ_{k,I} max(0, 1 − √(C_kk^I + ε)) + (λ_C/D) Σ_{k≠l,I} (C_kl^I)²."""
    n, d = h.shape

    def var_term(x):
        return jnp.sum(jax.nn.relu(1.0 - safe_sqrt(jnp.diagonal(_covariance(x)) + eps)))

    inv = jnp.sum(sq_dist_pos(h, hp)) / n
    return (
        lambda_i * inv
        + lambda_v / d * (var_term(h) + var_term(hp))
        + lambda_c / d * (_offdiag_sq_sum(_covariance(h)) + _offdiag_sq_sum(_covariance(hp)))
    )


def vicreg_nc_components(h, hp, *, lambda_i, lambda_v, lambda_c, eps):
    """In-span part (approximate): W_ij = 4λ_C (h_i − h̄)·(h_j − h̄)/(D(N−1)²), pull 2λ_I/N.

    Exact for the invariance term and the off-diagonal-covariance term's C(h_i − h̄)
    part; left out: −(4λ_C/(D(N−1))) diag(C)(h_i − h̄) and the variance hinge, both
    per-dimension rescalings of (h_i − h̄) that leave the paradigm's span.
    """
    del lambda_v, eps
    n, d = h.shape
    off = offdiag(n)
    hc = h - jnp.mean(h, axis=0, keepdims=True)
    weight = jnp.where(off, 4.0 * lambda_c * (hc @ hc.T) / (d * (n - 1) ** 2), 0.0)
    pull = jnp.full((n,), 2.0 * lambda_i / n, h.dtype)
    return _components(weight, pull, "h", h.dtype)


# --- registry -------------------------------------------------------------------------
register(
    LossSpec(
        name="alignment",
        title="Alignment",
        label="alignment",
        family="ineffective",
        kind="per_anchor",
        defaults={"alpha": 2.0},
        rules={"alpha": "positive"},
        per_anchor=_alignment,
        components=alignment_components,
        gd="1",
        weight="0 (no negatives)",
        ratio="— (pull α‖h_i − h_i'‖^{α−2} on h_i')",
        reference="Nie et al. 2023 Eq. 3 (Table 2: α = 2); Li et al. 2024 L^a, App. D.2 Eq. 7",
    )
)
register(
    LossSpec(
        name="uniformity",
        title="Uniformity",
        label="uniformity",
        family="ineffective",
        kind="batch",
        defaults={"t": 6.0},
        rules={"t": "positive"},
        batch=uniformity_batch,
        components=uniformity_components,
        gd="1",
        weight="2t e^{−t‖h_i−h_j'‖²} / Σ_{k≠l} e^{−t‖h_k−h_l'‖²}",
        ratio="0",
        reference="Nie et al. 2023 Eq. 4 and App. C (Table 2: t = 6)",
    )
)
register(
    LossSpec(
        name="align_uniform",
        title="Alignment & uniformity",
        label="alignment + uniformity",
        family="ineffective",
        kind="batch",
        defaults={"lam": 0.1, "alpha": 2.0, "t": 6.0},
        rules={"lam": "unit", "alpha": "positive", "t": "positive"},
        batch=align_uniform_batch,
        components=align_uniform_components,
        gd="1",
        weight="λ · 2t e^{−t‖h_i−h_j'‖²} / Σ_{k≠l} e^{−t‖h_k−h_l'‖²}",
        ratio="(1−λ) α ‖h_i−h_i'‖^{α−2} / (N Σ_j W_j)",
        reference="Nie et al. 2023 Eq. 2 (Table 2, BERT-base: λ = 0.1, α = 2, t = 6)",
    )
)
register(
    LossSpec(
        name="align_mhe",
        title="Alignment + ν·MHE",
        label="alignment + MHE",
        family="ineffective",
        kind="batch",
        defaults={"nu": 1.0},
        rules={"nu": "nonnegative"},
        negatives="h",
        batch=align_mhe_batch,
        components=align_mhe_components,
        gd="1",
        weight="2ν e^{2h_i·h_j} / Σ_{k<l} e^{2h_k·h_l}",
        ratio="Σ_{k<l} e^{2h_k·h_l} / (ν N Σ_{k≠i} e^{2h_i·h_k})",
        reference="Li et al. 2024 Sec. 4, Table 2, App. D.2 Eqs. 7-8",
    )
)
register(
    LossSpec(
        name="align_mhs",
        title="Alignment + ν·MHS",
        label="alignment + MHS",
        family="ineffective",
        kind="per_anchor",
        defaults={"nu": 1.0},
        rules={"nu": "nonnegative"},
        negatives="h",
        per_anchor=align_mhs_per_anchor,
        components=align_mhs_components,
        gd="1",
        weight="ν/‖h_i−h_j‖ for the nearest same-view j, else 0",
        ratio="2‖h_i−h_j‖/(νN)",
        reference="Li et al. 2024 Sec. 4, Table 2, App. D.2 Eq. 9",
    )
)
register(
    LossSpec(
        name="barlow_twins",
        title="Barlow Twins (ℓ2 form)",
        label="Barlow Twins",
        family="ineffective",
        kind="batch",
        defaults={"nu": 0.005},
        rules={"nu": "positive"},
        negatives="h",
        batch=barlow_twins_batch,
        components=barlow_twins_components,
        gd="1",
        weight="2ν h_i'·h_j' / N²",
        ratio="N (I − (1−ν) diag C) / (ν Σ_{k≠i} h_i'·h_k')  (a D×D matrix)",
        reference="Li et al. 2024 Sec. 4, Table 2, App. D.2 Eq. 10 (Tao et al. 2022); ν: Zbontar et al. 2021",
    )
)
register(
    LossSpec(
        name="barlow_twins_pearson",
        title="Barlow Twins (Pearson form)",
        family="ineffective",
        kind="batch",
        defaults={"lambda_bt": 0.005},
        rules={"lambda_bt": "nonnegative"},
        negatives="h",
        batch=barlow_twins_pearson_batch,
        components=barlow_twins_pearson_components,
        exact=False,
        gd="1",
        weight="least-squares fit of ∂L/∂h_i on {P h_j}",
        ratio="least-squares fit (pull / Σ_j W_j)",
        reference="Farina et al. 2023 Eq. 2 (λ_BT scanned in [5e-4, 2.5e-2]; 5e-3 as Zbontar et al. 2021)",
    )
)
register(
    LossSpec(
        name="vicreg",
        title="VICReg (Li et al. 2024 form)",
        label="VICReg",
        family="ineffective",
        kind="batch",
        defaults={"nu1": 0.04, "nu2": 1.0, "gamma": 1.0},
        rules={"nu1": "nonnegative", "nu2": "nonnegative", "gamma": "nonnegative"},
        negatives="h",
        batch=vicreg_batch,
        components=vicreg_components,
        exact=False,
        gd="1",
        weight="4ν1 h_i·h_j / (D(N−1)²)",
        ratio="D(N−1)² / (2Nν1 Σ_{k≠i} h_i·h_k)",
        reference="Li et al. 2024 Sec. 4, Table 2, App. D.2 Eq. 11 (approximate); defaults: Bardes et al. 2022",
    )
)
register(
    LossSpec(
        name="vicreg_nc",
        title="VICReg (Farina et al. 2023 form)",
        family="ineffective",
        kind="batch",
        defaults={"lambda_i": 1.0, "lambda_v": 25.0, "lambda_c": 0.04, "eps": 1e-4},
        rules={
            "lambda_i": "nonnegative",
            "lambda_v": "nonnegative",
            "lambda_c": "nonnegative",
            "eps": "nonnegative",
        },
        negatives="h",
        batch=vicreg_nc_batch,
        components=vicreg_nc_components,
        exact=False,
        gd="1",
        weight="4λ_C (h_i−h̄)·(h_j−h̄) / (D(N−1)²)",
        ratio="2λ_I / (N Σ_j W_j)",
        reference="Farina et al. 2023 Eq. 3 (λ_I = 1 as in Farina et al. 2023; λ_V, λ_C, ε from Bardes et al. 2022)",
    )
)
