"""The recipe of ``gradlab compare``: several runs' curves overlaid, one panel per quantity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gradlab.plot._style import new_figure, styled

__all__ = ["compare_curves"]


@styled
def compare_curves(panels: Sequence[tuple[str, Sequence[tuple]]], *, title: str | None = None, ncols: int = 4):
    """Runs overlaid over training steps: one line per configuration (the mean over its seeds), and
    the band between its seeds' smallest and largest values when it has several.

    Args:
      panels: ``(title, [(label, steps, mean, min, max), ...])`` per panel, as
        ``gradlab.compare.Comparison.panels()`` gives them (the loss, the dev Spearman, then the
        monitor's series: μ_pos, μ_neg, GD, hardest share, R, collapse metrics).
      title: the figure's title.
      ncols: panels per row.

    Returns:
      The matplotlib Figure; a configuration keeps its colour in every panel.
    """
    if not panels:
        raise ValueError("nothing to draw: no run recorded a curve")
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = new_figure(nrows, ncols, panel=(4.4, 3.3))
    flat = axes.ravel()
    labels = list(dict.fromkeys(label for _, lines in panels for label, *_ in lines))
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, (name, lines) in zip(flat, panels, strict=False):
        for label, steps, mean, low, high in lines:
            steps, mean = np.asarray(steps, float), np.asarray(mean, float)
            ax.plot(steps, mean, color=colors[label], lw=1.4, marker="o" if steps.size < 12 else None, ms=3,
                    label=label)
            low, high = np.asarray(low, float), np.asarray(high, float)
            if np.any(high > low):
                ax.fill_between(steps, low, high, color=colors[label], alpha=0.2, lw=0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
    for ax in flat[len(panels):]:
        ax.set_axis_off()
    handles, names = flat[0].get_legend_handles_labels()
    seen = {n for n in names}
    for ax in flat[1:len(panels)]:  # a configuration absent from the first panel still gets its entry
        for h, n in zip(*ax.get_legend_handles_labels(), strict=True):
            if n not in seen:
                seen.add(n)
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="outside lower center", ncols=min(4, len(names)), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
