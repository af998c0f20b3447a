"""Shared look: colormaps per quantity, axes in multiples of π, one set of rc settings.

matplotlib is imported lazily (inside functions) so that ``import gradlab`` and
``import gradlab.plot`` stay fast. Figures are built with the object API
(``matplotlib.figure.Figure``, no pyplot), so they work headless without choosing a
backend, and the rc settings apply only inside the ``styled`` recipes: the caller's
global ``rcParams`` and backend are never changed.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

#: One colormap per quantity, used by every figure that shows it.
CMAPS = {
    "gd": "viridis",
    "weight": "magma",
    "ratio": "Spectral_r",
    "norm": "inferno",
    "lemma1": "cividis",
    "feasible": "Greens",
    "satisfied": "Greens",
    "margin_grad": "plasma",
    "multiplier": "RdBu_r",
}

#: Colour-bar labels per quantity.
LABELS = {
    "gd": "mean GD",
    "weight": "hardest negative's share of W",
    "ratio": "mean ratio R",
    "norm": "gradient norm",
    "lemma1": "mean minimum ratio $r_{low}$",
    "feasible": "feasible fraction",
    "satisfied": "fraction satisfying Lemma 1",
    "margin_grad": r"$|\partial L / \partial \theta|$",
    "multiplier": "multiplier",
}

AXIS_LABELS = {
    "mu_pos": r"$\mu_{pos}$",
    "mu_neg": r"$\mu_{neg}$",
    "theta_pos": r"$\theta_{ii'}$",
    "theta_neg": r"$\theta_{ij'}$",
    "tau": r"$\tau$",
    "lam": r"$\lambda$",
    "theta+": r"$\theta^+$",
    "theta-": r"$\theta^-$",
    "q+": r"$\tilde q^+$",
    "q-": r"$\tilde q^-$",
}

_RC = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 12,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 9,
    "figure.dpi": 100,
}


def styled(fn):
    """Run a plotting function inside ``matplotlib.rc_context`` with gradlab's settings.

    Most settings are read when artists are made, inside the context. Tick label sizes are
    read again when the figure is drawn (they set how many ticks fit), so on a figure the
    recipe made itself they are pinned on every axes; a figure passed in through ``ax=`` is
    the caller's and is left as it is.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(_RC):
            fig = fn(*args, **kwargs)
        if kwargs.get("ax") is None:
            for ax in fig.axes:
                ax.tick_params(axis="x", labelsize=_RC["xtick.labelsize"])
                ax.tick_params(axis="y", labelsize=_RC["ytick.labelsize"])
        return fig

    return wrapper


def new_figure(nrows: int = 1, ncols: int = 1, *, panel=(4.2, 3.4), **kw):
    """A Figure and a 2-D array of axes, sized per panel (not managed by pyplot's state)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def pi_label(x: float, max_den: int = 20) -> str:
    """``x`` (radians) as a multiple of π: 0, π/20, 3π/20, π/2, π, −π/2 ... in Unicode.

    Plain text, not mathtext: tick labels are measured many times by the layout, and parsing
    mathtext made up a large part of the time ``gradlab figures`` spent saving.
    """
    frac = Fraction(x / math.pi).limit_denominator(max_den)
    if frac == 0:
        return "0"
    num, den = frac.numerator, frac.denominator
    sign = "\N{MINUS SIGN}" if num < 0 else ""
    num = abs(num)
    top = "\N{GREEK SMALL LETTER PI}" if num == 1 else f"{num}\N{GREEK SMALL LETTER PI}"
    return f"{sign}{top}" if den == 1 else f"{sign}{top}/{den}"


def pi_ticks(lo: float, hi: float, max_ticks: int = 7) -> np.ndarray:
    """Tick positions at multiples of π/20 (or a coarser π fraction) covering [lo, hi]."""
    span = max(hi - lo, 1e-12)
    for den in (20, 10, 8, 6, 5, 4, 3, 2, 1):
        step = math.pi / den
        first = math.ceil(lo / step - 1e-9)
        last = math.floor(hi / step + 1e-9)
        if last - first + 1 <= max_ticks and (last - first >= 2 or den == 20):
            return np.arange(first, last + 1) * step
    return np.linspace(lo, lo + span, 3)


def set_pi_axis(ax, which: str, lo: float, hi: float, max_ticks: int = 7):
    """Put ticks at multiples of π on the x or y axis of ``ax`` between lo and hi."""
    ticks = pi_ticks(lo, hi, max_ticks)
    labels = [pi_label(t) for t in ticks]
    if which == "x":
        ax.set_xticks(ticks, labels)
    else:
        ax.set_yticks(ticks, labels)


def is_angle_axis(name: str) -> bool:
    return name in ("mu_pos", "mu_neg", "theta_pos", "theta_neg", "theta", "alpha", "theta+", "theta-")
