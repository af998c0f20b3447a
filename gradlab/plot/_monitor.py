"""Recipes for the training monitor (Li et al. 2024 Sec. 3.2 on real embeddings).

``monitor_curves`` draws a monitor log's series over steps, ``lemma1_before_after`` and
``cosine_before_after`` compare two of its records, ``monitor_figures`` is the three of them as
a report shows them, ``track_summary`` draws ``gradlab.monitor.analyze``'s per-batch results.
``gradlab.figures.report`` (``gradlab report``) and ``gradlab track`` call them. Each takes data
(a log's series, records) and returns a Figure (object API); none computes a statistic.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gradlab.io import series_keys
from gradlab.plot._style import new_figure, styled

__all__ = ["monitor_curves", "lemma1_before_after", "cosine_before_after", "monitor_figures", "track_summary"]


def _note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _legend_or_note(ax, text, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=kw.pop("fontsize", 7), **kw)
    else:
        _note(ax, text)


def _window_curve(ax, series, key, color):
    """One point per completed window: a record repeats the latest window's value until the next
    completes, and ``rankme_step`` names the step that completed it (Garrido et al. 2023 RankMe)."""
    values, at = series.get(key), series.get("rankme_step")
    if values is None or at is None:
        return
    values, at = np.asarray(values, dtype=float), np.asarray(at, dtype=float)
    keep = np.isfinite(values) & np.isfinite(at) & (at >= 0)
    at, first = np.unique(at[keep], return_index=True)
    if at.size:
        ax.plot(at, values[keep][first], color=color, marker="o", ms=3, label=key)


@styled
def monitor_curves(series: Mapping[str, np.ndarray]):
    """Li et al. 2024 Sec. 3.2 curves over training steps, from a monitor log's series.

    Twelve panels: μ_pos / μ_neg with ±σ bands and σ_pos / σ_neg (Fig. 9), the GD-off
    fraction per loss, the hardest negative's share per τ (projected: solid; weight
    share: dashed; Fig. 7), the dynamic ratios at the hardest negative (Fig. 8b), the mean
    anchor–positive cosine (Fig. 8c), m_o / m_r (Zhang et al. 2022), alignment /
    uniformity, and the Lemma-1 minimum ratio (median, 25–75 % band) with the fraction
    satisfied by the static ratio; then dimensional collapse: RankMe (Garrido et al. 2023)
    at the steps that completed a window, the std of the l2-normalized embeddings (≈ 1/√D
    healthy, 0 collapsed) and α-ReQ (Agrawal et al. 2022). A panel with nothing recorded
    says so.

    Args:
      series: ``gradlab.monitor.log_series``'s dict: ``"step"`` (T,) and flat record
        names (``"gd_off_fraction/infonce"``, ``"hardest_share/0.05"``, ...) -> (T,).

    Returns:
      The matplotlib Figure (3 × 4 axes).
    """
    s = series
    step = np.asarray(s["step"])
    fig, axes = new_figure(3, 4, panel=(5.0, 4.0))
    axes = axes.ravel()

    ax = axes[0]
    for name, color in (("pos", "tab:green"), ("neg", "tab:red")):
        mu, sd = s.get(f"mu_{name}"), s.get(f"sigma_{name}")
        if mu is not None:
            ax.plot(step, mu, color=color, label=rf"$\mu_{{\rm {name}}}$")
            if sd is not None:
                ax.fill_between(step, mu - sd, mu + sd, color=color, alpha=0.2, label=rf"$\pm\sigma_{{\rm {name}}}$")
    ax.set_title(r"angle estimates $\mu$ (rad), $\pm\sigma$ (Fig. 9)")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[1]
    for name, color in (("pos", "tab:green"), ("neg", "tab:red")):
        if f"sigma_{name}" in s:
            ax.plot(step, s[f"sigma_{name}"], color=color, label=rf"$\sigma_{{\rm {name}}}$")
    ax.set_title(r"$\sigma$ estimates (rad, Fig. 9)")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[2]
    for k in series_keys(s, "gd_off_fraction"):
        ax.plot(step, s[f"gd_off_fraction/{k}"], label=k)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("fraction of anchors with GD off")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[3]
    taus = series_keys(s, "hardest_share")
    colors = [f"C{i}" for i in range(10)]
    for i, k in enumerate(taus):
        c = colors[i % 10]
        ax.plot(step, s[f"hardest_share/{k}"], color=c, label=rf"$\tau$={k}")
        if f"weight_share/{k}" in s:
            ax.plot(step, s[f"weight_share/{k}"], color=c, ls="--")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("hardest-negative share (—projected, --weight; Fig. 7)")
    _legend_or_note(ax, "no τ recorded", ncol=2)

    ax = axes[4]
    for k in series_keys(s, "ratio"):
        ax.plot(step, s[f"ratio/{k}"], label=k)
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_title("dynamic ratio, hardest negative, GD on (Fig. 8b)")
    _legend_or_note(ax, "no ratio loss recorded")

    ax = axes[5]
    if "cos_pos_mean" in s:
        ax.plot(step, s["cos_pos_mean"], color="tab:green", label=r"mean cos $\theta_{ii'}$")
    if "cos_neg_mean" in s:
        ax.plot(step, s["cos_neg_mean"], color="tab:red", label=r"mean cos $\theta_{ij'}$")
    ax.set_title("anchor–positive cosine (Fig. 8c)")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[6]
    for k, c in (("m_o", "tab:purple"), ("m_r", "tab:orange")):
        if k in s:
            ax.plot(step, s[k], color=c, label=k)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(r"collapse alarm: $m_o\to1$, $m_r\to0$ (Zhang et al. 2022)")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[7]
    for k, c in (("align", "tab:blue"), ("uniform", "tab:brown")):
        if k in s:
            ax.plot(step, s[k], color=c, label=k)
    ax.set_title("alignment / uniformity (Wang & Isola)")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[8]
    lams = sorted({k.split("/")[1] for k in s if k.startswith("lemma1_min_ratio/")}, key=float)
    for i, lam in enumerate(lams):
        c = colors[i % 10]
        q50 = s.get(f"lemma1_min_ratio/{lam}/q50")
        if q50 is None:
            continue
        ax.plot(step, q50, color=c, label=rf"median, $\lambda$={lam}")
        q25, q75 = s.get(f"lemma1_min_ratio/{lam}/q25"), s.get(f"lemma1_min_ratio/{lam}/q75")
        if q25 is not None and q75 is not None:
            ax.fill_between(step, q25, q75, color=c, alpha=0.2)
        sat = s.get(f"lemma1_satisfied_fraction/{lam}")
        if sat is not None:
            ax.plot(step, sat, color=c, ls=":", label=rf"satisfied by r=1, $\lambda$={lam}")
    ax.set_title("Lemma-1 minimum ratio (hardest negative)")
    _legend_or_note(ax, "no λ recorded")

    window = s.get("rankme_rows")
    rows = window[np.isfinite(window) & (window > 0)] if window is not None else ()
    for ax, key, color, title in (
            (axes[9], "rankme", "tab:blue", "RankMe (Garrido et al. 2023)" + (f", windows of {int(rows[0])} rows"
                                                                              if len(rows) else "")),
            (axes[11], "alpha_req", "tab:cyan", r"$\alpha$-ReQ (Agrawal et al. 2022)")):
        _window_curve(ax, s, key, color)
        ax.set_title(title)
        _legend_or_note(ax, "no window completed")

    ax = axes[10]
    if "embedding_std" in s:
        ax.plot(step, s["embedding_std"], color="tab:olive", label="embedding_std")
    ax.set_title(r"std of normalized embeddings ($\approx 1/\sqrt{D}$; 0: collapse)")
    _legend_or_note(ax, "nothing recorded")

    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return fig


@styled
def lemma1_before_after(first: Mapping, last: Mapping):
    """Li et al. 2024 Fig. 8(a) from a monitor log: the Lemma-1 minimum ratio per λ at two steps.

    From the records' histograms when the run recorded them (density steps), else from
    the recorded quantiles (10/25/50/75/90 % as a box); the static ratio 1 is marked.

    Args:
      first, last: two valid monitor records (dicts), e.g. the first and the last step.

    Returns:
      The matplotlib Figure, one axes per λ.
    """
    lams = sorted(first.get("lemma1_min_ratio", {}), key=float)
    fig, axes = new_figure(1, max(len(lams), 1), panel=(4.5, 3.6))
    axes = axes.ravel()
    for ax, lam in zip(axes, lams, strict=False):
        for rec, label, c in ((first, f"step {first['step']}", "tab:gray"), (last, f"step {last['step']}", "tab:blue")):
            hist = (rec.get("histograms") or {}).get("lemma1_min_ratio", {}).get(lam)
            if hist is not None and sum(v or 0 for v in hist) > 0:
                edges = np.asarray(rec["histograms"]["edges_lemma1"], dtype=float)
                counts = np.asarray([v or 0 for v in hist], dtype=float)
                dens = counts / (counts.sum() * np.diff(edges))
                ax.stairs(dens, edges, color=c, label=label, fill=False, lw=1.5)
            else:
                q = rec.get("lemma1_min_ratio", {}).get(lam, {})
                vals = [q.get(k) for k in ("q10", "q25", "q50", "q75", "q90")]
                if all(v is not None for v in vals):
                    y = 0.2 if rec is first else 0.6
                    ax.plot([vals[0], vals[4]], [y, y], color=c)
                    ax.plot([vals[1], vals[3]], [y, y], color=c, lw=6, alpha=0.6)
                    ax.plot([vals[2]], [y], "o", color="white", mec=c, label=label + " (10/25/50/75/90 %)")
        ax.axvline(1.0, color="0.4", ls=":", lw=1)
        ax.set_title(rf"Lemma-1 minimum ratio, $\lambda$={lam}")
        ax.set_xlabel("minimum ratio r")
        _legend_or_note(ax, "no feasible anchor at these steps")
    return fig


@styled
def cosine_before_after(first: Mapping, last: Mapping):
    """Li et al. 2024 Fig. 5 from a monitor log: cos θ_ij' and cos θ_ii' densities at two steps.

    Args:
      first, last: two valid monitor records whose ``"histograms"`` hold ``edges_cos``,
        ``cos_neg`` and ``cos_pos``.

    Returns:
      The matplotlib Figure (negatives left, positives right).
    """
    fig, axes = new_figure(1, 2, panel=(5.0, 3.6))
    axes = axes.ravel()
    for ax, key, title in ((axes[0], "cos_neg", r"anchor–negative cos $\theta_{ij'}$"),
                           (axes[1], "cos_pos", r"anchor–positive cos $\theta_{ii'}$")):
        for rec, c in ((first, "tab:gray"), (last, "tab:blue")):
            hist = rec["histograms"]
            edges = np.asarray(hist["edges_cos"], dtype=float)
            counts = np.asarray([v or 0 for v in hist[key]], dtype=float)
            if counts.sum() > 0:
                ax.stairs(counts / (counts.sum() * np.diff(edges)), edges, color=c, label=f"step {rec['step']}")
        ax.set_title(title + " (Fig. 5)")
        ax.set_xlabel("cosine")
        ax.legend(fontsize=8)
    return fig


def monitor_figure_recipes(series: Mapping[str, np.ndarray], first: Mapping, last: Mapping) -> dict:
    """What :func:`monitor_figures` draws, not drawn: ``{name: (recipe, args)}``, each figure
    ``recipe(*args)`` (a report's figures drawn elsewhere, in another process)."""
    recipes = {"curves": (monitor_curves, (series,)), "lemma1": (lemma1_before_after, (first, last))}
    if first.get("histograms") and last.get("histograms"):
        recipes["cosines"] = (cosine_before_after, (first, last))
    return recipes


def monitor_figures(series: Mapping[str, np.ndarray], first: Mapping, last: Mapping) -> dict:
    """A monitor log's report figures (``gradlab report``): ``{"curves": monitor_curves(series),
    "lemma1": lemma1_before_after(first, last)}``, and ``"cosines"`` (``cosine_before_after``)
    when both records hold histograms.

    Args:
      series, first, last: ``gradlab.monitor.report_data``'s series and its first and last records.
    """
    return {name: recipe(*args) for name, (recipe, args) in monitor_figure_recipes(series, first, last).items()}


@styled
def track_summary(res: Mapping):
    """Li et al. 2024 Figs. 5, 7, 8a and 8b on saved embeddings (``gradlab track``).

    Panels: the cosine distributions (Fig. 5), the hardest negative's share per τ, mean ± sd
    over batches (Fig. 7), the Lemma-1 minimum ratio per λ (Fig. 8a) and the dynamic ratio
    per batch (Fig. 8b).

    Args:
      res: the dict returned by ``gradlab.monitor.analyze(..., histograms=True)``.

    Returns:
      The matplotlib Figure (2 × 2 axes).
    """
    fig, axes = new_figure(2, 2, panel=(6.0, 4.5))
    axes = axes.ravel()
    hist = res.get("histograms")
    ax = axes[0]
    if hist is not None:
        edges = np.asarray(hist["edges_cos"], dtype=float)
        for key, c, label in (("cos_neg", "tab:red", r"anchor–negative cos $\theta_{ij'}$"),
                              ("cos_pos", "tab:green", r"anchor–positive cos $\theta_{ii'}$")):
            counts = np.asarray(hist[key], dtype=float).sum(axis=0)
            if counts.sum() > 0:
                ax.stairs(counts / (counts.sum() * np.diff(edges)), edges, color=c, label=label)
        ax.legend(fontsize=8)
    ax.set_title("cosine distributions (Fig. 5)")
    ax.set_xlabel("cosine")

    ax = axes[1]
    taus = sorted(res["hardest_share"], key=float)
    x = np.asarray([float(t) for t in taus])
    for key, ls, label in (("hardest_share", "-", "projected share"), ("weight_share", "--", "weight share")):
        vals = np.stack([np.asarray(res[key][t], dtype=float) for t in taus])  # (T, B)
        ax.errorbar(x, np.nanmean(vals, axis=1), yerr=np.nanstd(vals, axis=1), ls=ls, marker="o", capsize=3,
                    label=label)
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"$\tau$")
    ax.set_title("hardest negative's share per batch, mean ± sd (Fig. 7)")
    ax.legend(fontsize=8)

    ax = axes[2]
    per_anchor = res.get("lemma1_min_ratio_per_anchor", {})
    for i, lam in enumerate(sorted(per_anchor, key=float)):
        vals = np.asarray(per_anchor[lam], dtype=float).ravel()
        vals = vals[np.isfinite(vals)]
        if vals.size:
            ax.hist(vals, bins=60, density=True, histtype="step", lw=1.5, color=f"C{i}",
                    label=rf"$\lambda$={lam} (feasible {vals.size}/{np.size(per_anchor[lam])})")
    ax.axvline(1.0, color="0.4", ls=":", lw=1)
    ax.set_xlabel("minimum ratio r (hardest negative)")
    ax.set_title("Lemma-1 minimum ratio (Fig. 8a)")
    _legend_or_note(ax, "no feasible anchor")

    ax = axes[3]
    names = sorted(res.get("ratio", {}))
    data = [np.asarray(res["ratio"][k], dtype=float) for k in names]
    data = [d[np.isfinite(d)] for d in data]
    if names and any(d.size for d in data):
        ax.boxplot([d if d.size else [np.nan] for d in data], tick_labels=names)
    else:
        _note(ax, "no anchor passed the GD gate")
    ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
    ax.set_title("dynamic ratio per batch, anchors with GD on (Fig. 8b)")
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig
