"""Recipes for Rho et al. 2023's figures (Figs. 1, 2, 8): heatmaps over (θ, q) of the dicts
that ``gradlab.margins``' grid functions return (``free_gradient_grid``, ``multiplier_grid``,
``ratio_grid``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gradlab.plot._core import heatmap
from gradlab.plot._style import new_figure, set_pi_axis, styled

__all__ = ["margin_gradients", "margin_multipliers", "margin_ratio_grid"]


def _np(d, key):
    return np.asarray(d[key], dtype=float)


@styled
def margin_gradients(d: Mapping, *, tau: float = 0.25, beta: float = 1.0):
    """Rho et al. 2023 Fig. 1: |∂L̃/∂θ| without margins for a positive (over θ⁺, q⁺) and a
    negative (over θ⁻, q⁻); ``d`` is ``gradlab.margins.free_gradient_grid``'s dict."""
    theta, q = _np(d, "theta"), _np(d, "q")
    fig, axes = new_figure(1, 2, panel=(4.6, 3.7))
    for ax, key, xn, yn, head in ((axes[0, 0], "positive", "theta+", "q+", "positive sample"),
                                  (axes[0, 1], "negative", "theta-", "q-", "negative sample")):
        heatmap(_np(d, key).T, x=theta, y=q, x_name=xn, y_name=yn, quantity="margin_grad", ax=ax, vmin=0.0,
                title=f"{head} (β = {beta:g}, τ = {tau:g})")
    return fig


def _multiplier_norm(values, lo_clip=0.0, hi_clip=None):
    from matplotlib.colors import TwoSlopeNorm

    finite = values[np.isfinite(values)]
    lo = float(np.quantile(finite, 0.01)) if finite.size else 0.0
    hi = float(np.quantile(finite, 0.99)) if finite.size else 2.0
    if hi_clip is not None:
        hi = min(hi, hi_clip)
    lo = max(min(lo, 0.99), lo_clip if lo_clip is not None else lo)
    hi = max(hi, 1.01)
    return TwoSlopeNorm(vcenter=1.0, vmin=lo, vmax=hi)


@styled
def margin_multipliers(d: Mapping, *, tau: float = 0.25, m1: float = 0.4, beta: float = 1.0):
    """Rho et al. 2023 Fig. 2: the angular-margin multipliers over (θ⁺, q̃⁺): left sin(θ⁺+m1)/sin θ⁺
    (positives only), right (p − βq)/(p − βq̃) (positives and negatives); green where = 1.
    ``d`` is ``gradlab.margins.multiplier_grid``'s dict (Fig. 2: β = 1, τ = 0.25, m1 = 0.4)."""
    theta, q = _np(d, "theta_pos"), _np(d, "q_pos")
    fig, axes = new_figure(1, 2, panel=(4.6, 3.7))
    ang = _np(d, "angular").T
    ratio = _np(d, "ratio_pos").T
    heatmap(ang, x=theta, y=q, x_name="theta+", y_name="q+", quantity="multiplier", ax=axes[0, 0],
            norm=_multiplier_norm(ang, lo_clip=None, hi_clip=4.0), contours=[1.0], contour_color="lime",
            title=r"$\sin(\theta^+ + m_1)/\sin\theta^+$ (positives)")
    heatmap(ratio, x=theta, y=q, x_name="theta+", y_name="q+", quantity="multiplier", ax=axes[0, 1],
            norm=_multiplier_norm(ratio), contours=[1.0], contour_color="lime",
            title=r"$(p-\beta q)/(p-\beta\tilde q)$ (all samples)")
    fig.suptitle(f"β = {beta:g}, τ = {tau:g}, $m_1$ = {m1:g}")
    return fig


@styled
def margin_ratio_grid(d: Mapping, *, beta: float = 1.0):
    """Rho et al. 2023 Fig. 8: (p − βq)/(p − βq̃) over (θ⁺, q̃⁺), one panel per (m1, τ); green where = 1.

    ``d`` is ``gradlab.margins.ratio_grid``'s dict. The paper's text does not list its panels'
    values; ``gradlab figures`` uses m1 ∈ {0.2, 0.4, 0.8, 1.6} (Sec. 5.4 / Table 8) and
    τ ∈ {0.1, 0.25, 0.5}.
    """
    theta, q = _np(d, "theta_pos"), _np(d, "q_pos")
    m1s, taus = _np(d, "m1"), _np(d, "tau")
    ratio = _np(d, "ratio_pos")
    fig, axes = new_figure(len(taus), len(m1s), panel=(3.6, 3.0))
    for a, m1 in enumerate(m1s):
        for b, tau in enumerate(taus):
            vals = ratio[a, b].T
            heatmap(vals, x=theta, y=q, x_name="theta+", y_name="q+", quantity="multiplier", ax=axes[b, a],
                    norm=_multiplier_norm(vals), contours=[1.0], contour_color="lime",
                    title=f"$m_1$ = {m1:g}, τ = {tau:g}", label="ratio")
            set_pi_axis(axes[b, a], "x", float(theta.min()), float(theta.max()), max_ticks=4)
    return fig
