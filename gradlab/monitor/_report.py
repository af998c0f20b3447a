"""``report``: a monitor log turned into Li et al. 2024's Sec. 3.2 curves (figures + data + metadata).

The log may be JSON Lines or CSV (``ParadigmMonitor(sink="run.csv")``): ``read_log``
gives the same records from both, so the outputs of a run are the same either way.

Figures (matplotlib's object API, no pyplot: headless-safe, no global backend change):

* ``<prefix>_curves.<fmt>``: over training steps — μ_pos / μ_neg with ±σ bands and
  σ_pos / σ_neg (Fig. 9), the GD-off fraction per loss, the hardest negative's share
  per τ (projected: solid; weight share: dashed; Fig. 7), the dynamic ratios at the
  hardest negative (Fig. 8b), the mean anchor–positive cosine (Fig. 8c), alignment /
  uniformity, m_o / m_r (Zhang et al. 2022), and the Lemma-1 minimum ratio (median, 25–75 %
  band) with the fraction satisfied by the static ratio.
* ``<prefix>_lemma1.<fmt>``: the distribution of the Lemma-1 minimum ratio per λ at
  the first and the last monitored step (Fig. 8a: before / after training) — from
  the histograms when the run recorded them, else from the recorded quantiles.
* ``<prefix>_cosines.<fmt>`` (only with histograms): cos θ_ii' and cos θ_ij' at the
  first and last step (Fig. 5).

Data: ``<prefix>.npz`` holds ``step`` and every numeric series under its flattened
record name (``"gd_mean/infonce"``, ``"hardest_share/0.05"``, ...), NaN where a value
was missing. Metadata: ``<prefix>.json`` (source, counts, invalid reasons, keys,
versions, files). Every file is written atomically.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

from gradlab.io import atomic_write_text, save_npz_atomic
from gradlab.monitor._sinks import flatten, log_format, read_log

__all__ = ["report", "log_series", "track_figure"]

_SKIP = {"time", "valid", "reason", "n", "d", "update_s"}


def log_series(records: list[dict]) -> dict[str, np.ndarray]:
    """Valid records -> ``{"step": (T,), "<flat name>": (T,)}`` (NaN where missing)."""
    valid = [r for r in records if r.get("valid")]
    flats = []
    for r in valid:
        r = {k: v for k, v in r.items() if k != "histograms" and k not in _SKIP}
        flats.append(flatten(r))
    names = []
    for f in flats:
        for k, v in f.items():
            if k not in names and (v is None or isinstance(v, (int, float))) and not isinstance(v, bool):
                names.append(k)
    out = {}
    for k in names:
        out[k] = np.array([np.nan if f.get(k) is None else float(f[k]) for f in flats], dtype=np.float64)
    return out


def _note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _legend_or_note(ax, text, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=kw.pop("fontsize", 7), **kw)
    else:
        _note(ax, text)


def _keys(series, stat):
    return [k.split("/", 1)[1] for k in series if k.startswith(stat + "/") and k.count("/") == 1]


def _savefig(fig, path: Path, fmt: str):
    from gradlab.plot._style import save_figure

    save_figure(fig, path, fmt, dpi=120)


def _curves_figure(s):
    from matplotlib.figure import Figure

    step = s["step"]
    fig = Figure(figsize=(15, 12))
    axes = fig.subplots(3, 3).ravel()

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
    for k in _keys(s, "gd_off_fraction"):
        ax.plot(step, s[f"gd_off_fraction/{k}"], label=k)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("fraction of anchors with GD off")
    _legend_or_note(ax, "nothing recorded")

    ax = axes[3]
    taus = _keys(s, "hardest_share")
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
    for k in _keys(s, "ratio"):
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

    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _lemma1_figure(first, last, s):
    from matplotlib.figure import Figure

    lams = sorted(first.get("lemma1_min_ratio", {}), key=float)
    fig = Figure(figsize=(4.5 * max(len(lams), 1), 3.6))
    axes = np.atleast_1d(fig.subplots(1, max(len(lams), 1)))
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
    fig.tight_layout()
    return fig


def _cosine_figure(first, last):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
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
    fig.tight_layout()
    return fig


def report(log_path, out_dir=".", *, formats=("png",), prefix: str = "monitor", plot: bool = True,
           extra_meta: dict | None = None) -> dict:
    """Plot a monitor log (JSON Lines or CSV) over training steps; write figures, data and metadata.

    Args:
      log_path: a log written by ``ParadigmMonitor``, JSON Lines or CSV, told apart by its
        content (see ``read_log``; truncated lines are skipped).
      out_dir: where to write (created if needed).
      formats: figure formats (``"png"``, ``"pdf"``, ``"svg"``).
      prefix: file-name prefix.
      plot: ``False`` writes only the data and the metadata.
      extra_meta: more metadata to record (e.g. the command line).

    Returns:
      The metadata dict (also written to ``<prefix>.json``), with ``"files"``.

    Raises:
      FileNotFoundError: the log does not exist.
      ValueError: the log holds no valid record, is not a monitor log (binary, or neither
        JSON Lines nor CSV), or a figure format is unknown.
    """
    log_path = Path(log_path)
    if not log_path.is_file():
        raise FileNotFoundError(f"no such log file: {log_path}")
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    for fmt in formats:
        if fmt not in ("png", "pdf", "svg"):
            raise ValueError(f"unknown figure format {fmt!r}; choose from png, pdf, svg")
    records = read_log(log_path)
    valid = sorted((r for r in records if r.get("valid")), key=lambda r: r.get("step", 0))
    if not valid:
        raise ValueError(f"{log_path} holds no valid monitor record ({len(records)} records read)")
    series = log_series(valid)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []

    data = dict(series)
    first, last = valid[0], valid[-1]
    if first.get("histograms"):
        for tag, rec in (("first", first), ("last", last)):
            for key in ("cos_pos", "cos_neg"):
                data[f"histograms/{key}/{tag}"] = np.asarray([v or 0 for v in rec["histograms"][key]], dtype=float)
        data["histograms/edges_cos"] = np.asarray(first["histograms"]["edges_cos"], dtype=float)
    npz = save_npz_atomic(out_dir / f"{prefix}.npz", **data)
    files.append(str(npz))

    if plot:
        figs = {"curves": _curves_figure(series), "lemma1": _lemma1_figure(first, last, series)}
        if first.get("histograms") and last.get("histograms"):
            figs["cosines"] = _cosine_figure(first, last)
        for name, fig in figs.items():
            for fmt in formats:
                path = out_dir / f"{prefix}_{name}.{fmt}"
                _savefig(fig, path, fmt)
                files.append(str(path))

    from gradlab._version import __version__

    reasons = Counter(r.get("reason") for r in records if not r.get("valid"))
    meta = {
        "kind": "gradlab monitor report",
        "source": str(log_path.resolve()),
        "log_format": log_format(log_path),
        "records": len(records),
        "valid": len(valid),
        "invalid": sum(reasons.values()),
        "invalid_reasons": dict(reasons),
        "steps": [valid[0].get("step"), valid[-1].get("step")],
        "losses": _keys(series, "gd_mean"),
        "taus": _keys(series, "hardest_share"),
        "lambdas": sorted({k.split("/")[1] for k in series if k.startswith("lemma1_min_ratio/")}, key=float),
        "series": sorted(series),
        "gradlab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files + [str(out_dir / f"{prefix}.json")],
        **dict(extra_meta or {}),
    }
    atomic_write_text(out_dir / f"{prefix}.json", json.dumps(meta, indent=2, allow_nan=False, default=_json_default))
    return meta


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(type(x).__name__)


def track_figure(res: dict):
    """One figure for ``analyze`` results (``gradlab track``): Figs. 5, 7, 8a and 8b on saved embeddings.

    Args:
      res: the dict returned by ``analyze(..., histograms=True)``.

    Returns:
      A matplotlib ``Figure`` (object API; no pyplot state).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 9))
    axes = fig.subplots(2, 2).ravel()
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
    fig.tight_layout()
    return fig
