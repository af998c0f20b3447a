"""Exact mean GD of the indicator-type losses (MPT, MET, MAT) by one-dimensional quadrature.

For these losses GD = 1[the hardest negative is nearer than a threshold angle a(θ_pos)]:

* MPT: c_max > c_pos − m,                   a = arccos(c_pos − m)
* MET: c_max > 1 − (d_pos + m)² / 2,        a = arccos(1 − (d_pos + m)²/2)   (d = √(2 − 2c))
* MAT: θ_min < θ_pos + m,                   a = θ_pos + m

(a = π⁺, i.e. GD = 1 surely, when the cosine threshold is below −1 or the angle above π).
With N − 1 iid negatives, P(GD = 1 | θ_pos) = 1 − S(a)^{N−1}, S(a) = P(fold(θ_neg) ≥ a),
and under θ_neg ~ N(μ_neg, σ_neg²) read as a geometric angle,

    P(fold θ < a) = Σ_k Φ((2πk + a − μ)/σ) − Φ((2πk − a − μ)/σ),  k ∈ {−1, 0, 1}.

The mean GD is that probability averaged over θ_pos ~ N(μ_pos, σ_pos²): composite
Gauss–Legendre on μ_pos ± 10 σ_pos (float64, SciPy's ``ndtr``). Both laws (normal,
reflected) give the same value: the losses see only the geometric angle.
"""

from __future__ import annotations

import numpy as np

from gradlab.io import Result
from gradlab.losses import threshold_angle as triplet_threshold_angle
from gradlab.simulate._results import as_loss, grid_result, meta

INDICATOR_LOSSES = ("mpt", "met", "mat")


def _fold(theta):
    """NumPy twin of ``geometry.fold_angle``: the quadrature must stay float64 whatever jax_enable_x64 says."""
    return np.abs(np.mod(theta + np.pi, 2 * np.pi) - np.pi)


def threshold_angle(name: str, theta_pos, m: float):
    """The angle a(θ_pos) below which a negative switches GD on; +inf means always on.

    a = d⁻¹(d(θ_pos) + m) in the loss's metric d, evaluated in float64 NumPy by the same
    expressions as the JAX kernels' gate (``gradlab.losses._ops.threshold_angle``).
    """
    if name not in INDICATOR_LOSSES:
        raise ValueError(f"no quadrature for {name!r}; indicator losses: {INDICATOR_LOSSES}")
    return triplet_threshold_angle(name, _fold(np.asarray(theta_pos, dtype=float)), m, np)


def prob_angle_below(a, mu, sigma):
    """P(fold(θ) < a) for θ ~ N(mu, sigma²); a in [0, π] or +inf (probability 1). Broadcasts."""
    # SciPy only when a quadrature runs: ``import gradlab.simulate`` stays lean
    from scipy.special import ndtr

    a = np.asarray(a, dtype=float)
    finite = np.isfinite(a)
    af = np.where(finite, a, 0.0)
    p = np.zeros(np.broadcast_shapes(af.shape, np.shape(mu), np.shape(sigma)))
    for k in (-1, 0, 1):
        p = p + ndtr((2 * np.pi * k + af - mu) / sigma) - ndtr((2 * np.pi * k - af - mu) / sigma)
    return np.where(finite, np.clip(p, 0.0, 1.0), 1.0)


def _nodes(panels: int, order: int, half_width: float):
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(-half_width, half_width, panels + 1)
    mid, half = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    t = (mid[:, None] + half[:, None] * x[None]).ravel()
    wt = (half[:, None] * w[None]).ravel()
    return t, wt * np.exp(-t**2 / 2) / np.sqrt(2 * np.pi)


def mean_gd_exact(name: str, m: float, mu_pos, mu_neg, sigma_pos: float, sigma_neg: float, n_neg: int, *, panels: int = 160, order: int = 8):
    """Exact E[GD] on the grid: (len(mu_pos), len(mu_neg)) float64."""
    if not (sigma_pos > 0 and sigma_neg > 0):
        raise ValueError(f"quadrature needs sigma_pos > 0 and sigma_neg > 0; got {sigma_pos}, {sigma_neg}")
    mu_pos = np.asarray(mu_pos, float)
    mu_neg = np.asarray(mu_neg, float)
    from gradlab._memory import check_fits

    row = 8.0 * mu_neg.size * panels * order  # one (Q, T) float64 array of a row
    check_fits(f"the quadrature GD map on a {mu_pos.size} × {mu_neg.size} grid", 8.0 * mu_pos.size * mu_neg.size, 6 * row)
    t, w = _nodes(panels, order, 10.0)
    out = np.empty((mu_pos.size, mu_neg.size))
    for i, mp in enumerate(mu_pos):
        a = threshold_angle(name, mp + sigma_pos * t, m)  # (T,)
        p_below = prob_angle_below(a[None, :], mu_neg[:, None], sigma_neg)  # (Q, T)
        s = np.clip(1.0 - p_below, 0.0, 1.0)
        g = -np.expm1(n_neg * np.log(np.where(s > 0, s, 1.0)))
        g = np.where(s > 0, g, 1.0)
        out[i] = g @ w / w.sum()
    return out


def quadrature_gd_map(loss, protocol) -> Result:
    """Exact mean GD map of an indicator-type loss (MPT, MET, MAT): ``gd_map(..., exact=True)``.

    Returns:
      ``Result`` with dims (mu_pos, mu_neg), ``stderr`` None, ``meta["method"] = "quadrature"``.
    """
    loss = as_loss(loss)
    if loss.name not in INDICATOR_LOSSES:
        raise ValueError(f"exact (quadrature) GD maps exist for {', '.join(INDICATOR_LOSSES)}; got {loss.name!r}")
    mean = mean_gd_exact(loss.name, loss.params["m"], protocol.mu_pos, protocol.mu_neg,
                         protocol.sigma_pos, protocol.sigma_neg, protocol.n_neg)
    return grid_result(protocol, mean, stderr=None, meta=meta("gd_map", protocol, loss, method="quadrature"))
