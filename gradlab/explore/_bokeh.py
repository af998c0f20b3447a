"""The explorer's drawing (Bokeh, from the ``explore`` extra): one map figure per panel, fed by a named
``ColumnDataSource`` (``explore_gd``, ``explore_weight``, ``explore_ratio``, ``explore_lemma1``; the
run's path in ``explore_run``). It reads the panels' ``Result``s; it computes nothing.

Each panel's source holds ``image`` (the drawn (G_pos, G_neg) array, μ_pos along the rows: masked
cells NaN, shown grey) and the image's placement ``x``, ``y``, ``dw``, ``dh``, so that a new grid
is one new ``data`` dict. The live page (``gradlab.explore.Explorer``) replaces ``data``; the static
page (``gradlab.explore.static_explorer``) swaps precomputed dicts in the browser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["PANEL_STYLE", "image_data", "empty_data", "map_figure", "path_data", "path_source", "source_name",
           "show_data"]

#: Per panel: the colour range and the palette's name (the matplotlib recipes' colours).
PANEL_STYLE = {"gd": ((0.0, 1.0), "viridis"), "weight": ((0.0, 1.0), "magma"),
               "ratio": ((0.0, 3.0), "spectral"), "lemma1": ((0.0, 1.0), "greens")}


def source_name(key: str) -> str:
    """The name of a panel's data source in the Bokeh document (the browser test reads it)."""
    return f"explore_{key}"


def _palette(name: str):
    from bokeh import palettes

    if name == "spectral":
        return palettes.interp_palette(palettes.Spectral11, 256)
    if name == "greens":
        return tuple(reversed(palettes.Greens256))
    return {"viridis": palettes.Viridis256, "magma": palettes.Magma256}[name]


def _placement(axis: np.ndarray) -> tuple[float, float]:
    """(start, width) of an image whose cell centres are ``axis``."""
    axis = np.asarray(axis, float)
    step = float(axis[1] - axis[0]) if axis.size > 1 else 0.05
    return float(axis[0] - step / 2), float(axis[-1] - axis[0] + step)


def image_data(result) -> dict[str, list]:
    """A panel ``Result`` (dims mu_pos, mu_neg) as its source's ``data``: the masked mean and placement."""
    x, dw = _placement(result.coords["mu_neg"])
    y, dh = _placement(result.coords["mu_pos"])
    return {"image": [np.asarray(result.masked_mean(), dtype=np.float32)], "x": [x], "y": [y], "dw": [dw], "dh": [dh]}


def empty_data(like: Mapping[str, list]) -> dict[str, list]:
    """An empty panel (the share of a loss without τ) over the same placement as ``like``."""
    return {**{k: list(v) for k, v in like.items()}, "image": [np.full((1, 1), np.nan, np.float32)]}


def path_data(run: Mapping[str, np.ndarray] | None) -> dict[str, list]:
    """A run's (μ_pos, μ_neg) path as the ``explore_run`` source's data (empty without a run)."""
    if run is None:
        return {"x": [], "y": [], "step": []}
    return {"x": np.asarray(run["mu_neg"], float).tolist(), "y": np.asarray(run["mu_pos"], float).tolist(),
            "step": np.asarray(run["step"], float).tolist()}


def path_source(run: Mapping[str, np.ndarray] | None = None):
    """The ``explore_run`` source every panel draws its path from."""
    from bokeh.models import ColumnDataSource

    return ColumnDataSource(path_data(run), name="explore_run")


def _pi_ticks(lo: float, hi: float) -> tuple[list[float], dict[float, str]]:
    ticks = [k * math.pi / 6 for k in range(7) if lo - 1e-9 <= k * math.pi / 6 <= hi + 1e-9]
    names = {0: "0", 1: "π/6", 2: "π/3", 3: "π/2", 4: "2π/3", 5: "5π/6", 6: "π"}
    return ticks, {t: names[round(t / (math.pi / 6))] for t in ticks}


def map_figure(key: str, title: str, data: Mapping[str, list], path_source, *, width: int = 360,
               height: int = 310) -> tuple[Any, Any]:
    """One panel: an image of ``data`` with its colour bar and π ticks, the run's path on top.

    Returns:
      ``(figure, source)``: the source is named ``source_name(key)``.
    """
    from bokeh.models import ColorBar, ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper
    from bokeh.plotting import figure

    (low, high), palette = PANEL_STYLE[key]
    source = ColumnDataSource(dict(data), name=source_name(key))
    x, dw, y, dh = data["x"][0], data["dw"][0], data["y"][0], data["dh"][0]
    fig = figure(title=title, width=width, height=height, x_range=(x, x + dw), y_range=(y, y + dh),
                 x_axis_label="μ_neg", y_axis_label="μ_pos", tools="pan,wheel_zoom,reset,save",
                 name=f"explore_{key}_figure")
    mapper = LinearColorMapper(palette=_palette(palette), low=low, high=high, nan_color="#d9d9d9")
    image = fig.image(image="image", x="x", y="y", dw="dw", dh="dh", source=source, color_mapper=mapper)
    fig.add_tools(HoverTool(renderers=[image], tooltips=[("μ_neg", "$x{0.000}"), ("μ_pos", "$y{0.000}"),
                                                          ("value", "@image{0.0000}")]))
    fig.add_layout(ColorBar(color_mapper=mapper, width=10), "right")
    for axis, (lo, hi) in ((fig.xaxis, (x, x + dw)), (fig.yaxis, (y, y + dh))):
        ticks, names = _pi_ticks(lo, hi)
        axis.ticker = FixedTicker(ticks=ticks)
        axis.major_label_overrides = names
    fig.line("x", "y", source=path_source, line_color="white", line_width=3)
    fig.line("x", "y", source=path_source, line_color="black", line_width=1.2)
    fig.scatter("x", "y", source=path_source, size=3, color="black")
    fig.grid.visible = False
    return fig, source


def show_data(fig, source, data: Mapping[str, list], title: str | None = None) -> None:
    """Put new ``data`` into a panel (its ranges follow a new grid) and, if given, a new title."""
    source.data = dict(data)
    x, dw, y, dh = data["x"][0], data["dw"][0], data["y"][0], data["dh"][0]
    fig.x_range.start, fig.x_range.end = x, x + dw
    fig.y_range.start, fig.y_range.end = y, y + dh
    if title is not None:
        fig.title.text = title
