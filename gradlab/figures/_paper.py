"""The paper figures as a registry: id -> what it reproduces, how it is computed and drawn.

``paper_figure(id)`` returns the matplotlib Figure and its data as one ``Result``: the same
figure and the same arrays that ``gradlab figures --only ID`` writes as ``ID.png``,
``ID.npz`` and ``ID.json``. Each entry computes with the library (``gradlab.simulate``,
``gradlab.norms``, ``gradlab.margins``) and says how ``gradlab.plot``'s recipes draw the
result (a ``Drawing``: ``paper_drawing(id)`` computes without drawing, and the drawing can be
made in another process); its ``params`` are the values it uses, and keyword overrides of
``paper_figure`` replace them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradlab import defaults

__all__ = ["COMPONENTS", "FIGURES", "Drawing", "PaperFigure", "component_figure", "figure_ids", "paper_drawing",
           "paper_figure"]

#: ``quick=True``: the Monte-Carlo protocol, the θ grid of the norm maps, the grid of the margin maps.
QUICK_PROTOCOL = {"grid": 12, "batches": 32, "batch_size": 16}
NORM_GRID = {"full": 300, "quick": 40}
MARGIN_GRID = {"full": 240, "quick": 40}

#: Rho et al. 2023 Fig. 8's panels vary m1 and τ without listing the values; ours: the m1 of
#: Sec. 5.4 / Table 8 and around it, and τ around App. C's 0.25.
RHO2023_FIG8_M1 = (0.2, 0.4, 0.8, 1.6)
_TAU, _BETA = defaults.RHO2023_TAU, defaults.RHO2023_BETA  # Rho et al. 2023 App. C
RHO2023_FIG8_TAU = (0.1, defaults.RHO2023_TAU, 0.5)


@dataclass(frozen=True)
class Drawing:
    """A figure not drawn yet: a ``gradlab.plot`` recipe and its arguments (host arrays, ``Result``
    objects, numbers), so that it pickles and is drawn in a process without JAX. ``drawing()``
    returns the Figure."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self):
        return self.fn(*self.args, **self.kwargs)


@dataclass(frozen=True)
class PaperFigure:
    """One registry entry.

    Attributes:
      paper: the figure it reproduces, e.g. ``"Li et al. 2024 Fig. 2"``.
      shows: what it shows, in words.
      build: ``build(params, quick=, seed=) -> (Drawing, Result)``.
      params: the parameters ``build`` uses (``paper_figure``'s overrides replace them).
    """

    paper: str
    shows: str
    build: Callable[..., tuple[Any, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)


def _protocol(params: Mapping[str, Any], quick: bool, seed: int):
    from gradlab.simulate import Protocol

    if params.get("protocol") is not None:
        return params["protocol"]
    return Protocol(seed=seed, **(QUICK_PROTOCOL if quick else {}))


def _stack(results, key: str, labels=None, meta=None):
    from gradlab.io import Result

    labels = [str(r.meta.get(key)) for r in results] if labels is None else labels
    return Result.stack(results, key, labels, meta)


def _gd_maps(params, *, quick, seed):
    from gradlab import simulate
    from gradlab.plot import gd_maps

    proto = _protocol(params, quick, seed)
    results = [simulate.gd_map(name, proto) for name in params["losses"]]
    return Drawing(gd_maps, (results,), {"suptitle": params["title"]}), _stack(results, "loss")


def _ratio_maps(params, *, quick, seed):
    from gradlab import simulate
    from gradlab.plot import ratio_maps

    proto = _protocol(params, quick, seed)
    results = [simulate.ratio_map(name, proto) for name in params["losses"]]
    return Drawing(ratio_maps, (results,), {"suptitle": params["title"]}), _stack(results, "loss")


def _weight_share(params, *, quick, seed):
    from gradlab import simulate
    from gradlab.plot import weight_share_curves

    r = simulate.weight_share(_protocol(params, quick, seed))
    return Drawing(weight_share_curves, (r,)), r


def _min_ratio_distribution(params, *, quick, seed):
    from gradlab import simulate
    from gradlab.plot import min_ratio_distribution

    r = simulate.min_ratio_distribution(_protocol(params, quick, seed), lams=params["lams"])
    return Drawing(min_ratio_distribution, (r,)), r


def _lemma1_map(params, *, quick, seed):
    from gradlab import simulate
    from gradlab.plot import lemma1_maps

    r = simulate.lemma1_map(_protocol(params, quick, seed), lam=params["lam"])
    return Drawing(lemma1_maps, (r,)), r


def _norm_maps(params, *, quick, seed):
    from gradlab import norms
    from gradlab.plot import norm_maps

    grid = params["grid"] or NORM_GRID["quick" if quick else "full"]
    results = [norms.norm_result(name, part=params["part"], negatives=k, grid=grid)
               for name in params["losses"]
               for k in (params["infonce_negatives"] if name == "infonce" else (norms.DEFAULT_NEGATIVES,))]
    return Drawing(norm_maps, (results,), {"ncols": params["ncols"], "panel": params["panel"]}), norms.stack_panels(results)


def _margin_axes(params, quick):
    g = params["grid"] or MARGIN_GRID["quick" if quick else "full"]
    return np.linspace(0.01, math.pi - 0.01, g), np.linspace(0.005, 0.995, g)


def _grid_result(d: Mapping[str, Any], dims: Sequence[str], mean: str, meta: Mapping[str, Any]):
    """A dict of margin grids as a Result: ``dims`` its axes, ``mean`` the named quantity, every
    quantity (``mean``'s too) also under its own name."""
    from gradlab.io import Result

    quantities = {k: np.asarray(v) for k, v in d.items() if k not in dims}
    return Result(dims=tuple(dims), coords={k: np.asarray(d[k]) for k in dims}, mean=quantities[mean],
                  extra=quantities, extra_dims={k: tuple(dims) for k in quantities}, meta=dict(meta))


def _on_host(d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A dict of grids as NumPy arrays (a ``Drawing``'s arguments are drawn where JAX is not imported)."""
    return {k: np.asarray(v) for k, v in d.items()}


def _margin_gradients(params, *, quick, seed):
    from gradlab import margins
    from gradlab.plot import margin_gradients

    tau, beta = params["tau"], params["beta"]
    d = _on_host(margins.free_gradient_grid(*_margin_axes(params, quick), tau=tau, beta=beta, dtype=np.float32))
    data = _grid_result(d, ("theta", "q"), "positive", {"tau": tau, "beta": beta, "reference": "Rho et al. 2023 Fig. 1, Eq. 14"})
    return Drawing(margin_gradients, (d,), {"tau": tau, "beta": beta}), data


def _margin_multipliers(params, *, quick, seed):
    from gradlab import margins
    from gradlab.plot import margin_multipliers

    tau, beta, m1 = params["tau"], params["beta"], params["m1"]
    d = _on_host(margins.multiplier_grid(*_margin_axes(params, quick), tau=tau, beta=beta, m1=m1, dtype=np.float32))
    data = _grid_result(d, ("theta_pos", "q_pos"), "total_pos",
                        {"tau": tau, "beta": beta, "m1": m1, "reference": "Rho et al. 2023 Fig. 2, Theorem 4.1"})
    return Drawing(margin_multipliers, (d,), {"tau": tau, "m1": m1}), data


def _margin_ratio_grid(params, *, quick, seed):
    from gradlab import margins
    from gradlab.plot import margin_ratio_grid

    d = _on_host(margins.ratio_grid(*_margin_axes(params, quick), m1_values=params["m1"], tau_values=params["tau"],
                                    beta=params["beta"], dtype=np.float32))
    data = _grid_result(d, ("m1", "tau", "theta_pos", "q_pos"), "ratio_pos",
                        {"beta": params["beta"], "reference": "Rho et al. 2023 Fig. 8"})
    return Drawing(margin_ratio_grid, (d,)), data


def _norms(part: str, losses: Sequence[str], ncols: int, panel: tuple[float, float] = (4.3, 3.5)) -> dict[str, Any]:
    return {"part": part, "losses": tuple(losses), "infonce_negatives": defaults.NORM_INFONCE_NEGATIVES,
            "ncols": ncols, "panel": panel, "grid": None}


#: Every paper figure: id -> ``PaperFigure``. ``gradlab figures`` writes them all.
FIGURES: dict[str, PaperFigure] = {
    "li2024_fig2": PaperFigure("Li et al. 2024 Fig. 2", "mean GD over (μ_pos, μ_neg), ArcCon and MET", _gd_maps,
                               {"losses": ("arccon", "met"), "title": "gradient dissipation: ArcCon and MET",
                                "protocol": None}),
    "li2024_fig10": PaperFigure("Li et al. 2024 Fig. 10", "mean GD over (μ_pos, μ_neg), InfoNCE and MPT", _gd_maps,
                                {"losses": ("infonce", "mpt"), "title": "gradient dissipation: InfoNCE and MPT",
                                 "protocol": None}),
    "li2024_fig3": PaperFigure("Li et al. 2024 Fig. 3", "hardest negative's share of the weight vs μ_neg for six τ",
                               _weight_share, {"protocol": None}),
    "li2024_fig4": PaperFigure("Li et al. 2024 Fig. 4", "dynamic ratios of ArcCon, MET, MAT with the masks", _ratio_maps,
                               {"losses": ("arccon", "met", "mat"),
                                "title": "dynamic ratio (shaded: pairs that do not occur in training)", "protocol": None}),
    "li2024_fig8a": PaperFigure("Li et al. 2024 Fig. 8(a), simulated", "distribution of Lemma 1's minimum ratio for four λ",
                                _min_ratio_distribution, {"lams": defaults.LEMMA1_LAMS, "protocol": None}),
    "li2024_lemma1": PaperFigure("Li et al. 2024 Lemma 1 (no paper figure)",
                                 "minimum-ratio map and satisfied fractions, λ = 0.1", _lemma1_map,
                                 {"lam": 0.1, "protocol": None}),
    "nie2023_fig2a": PaperFigure("Nie et al. 2023 Fig. 2(a)",
                                 "alignment-part norms: InfoNCE for K = 64, 512, 4096, 32768; alignment; DCL",
                                 _norm_maps, _norms("pos", ("infonce", "align", "dcl"), ncols=3)),
    "nie2023_fig2b": PaperFigure("Nie et al. 2023 Fig. 2(b)", "alignment-part norms of DCL+, MPT, MET, MAT",
                                 _norm_maps, _norms("pos", ("dcl+", "mpt", "met", "mat"), ncols=4)),
    "nie2023_fig4": PaperFigure("Nie et al. 2023 Fig. 4",
                                "uniformity-part norms (one negative): InfoNCE ×4 K, uniformity, DCL, DCL+, MPT, MET, MAT",
                                _norm_maps, _norms("neg", ("infonce", "uniform", "dcl", "dcl+", "mpt", "met", "mat"), ncols=2,
                                                   panel=(3.4, 2.7))),
    "rho2023_fig1": PaperFigure("Rho et al. 2023 Fig. 1", f"gradient magnitudes without margins (β = {_BETA:g}, τ = {_TAU:g})",
                                _margin_gradients, {"tau": _TAU, "beta": _BETA, "grid": None}),
    "rho2023_fig2": PaperFigure("Rho et al. 2023 Fig. 2",
                                f"angular-margin multipliers (β = {_BETA:g}, τ = {_TAU:g}, m1 = 0.4)",
                                _margin_multipliers, {"tau": _TAU, "beta": _BETA, "m1": 0.4, "grid": None}),
    "rho2023_fig8": PaperFigure("Rho et al. 2023 Fig. 8", "(p − βq)/(p − βq̃) for several m1 and τ", _margin_ratio_grid,
                                {"m1": RHO2023_FIG8_M1, "tau": RHO2023_FIG8_TAU, "beta": _BETA, "grid": None}),
}


def figure_ids(only: Sequence[str] | None = None) -> list[str]:
    """Every figure id in order, or the ids ``only`` after checking each.

    Raises:
      ValueError: an id that is not in ``FIGURES`` (one line listing the ids).

    Examples:
      >>> figure_ids(["li2024_fig2"])
      ['li2024_fig2']
    """
    ids = list(only) if only else list(FIGURES)
    unknown = [i for i in ids if i not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure id {unknown[0]!r}; choose from {', '.join(FIGURES)}")
    return ids


def _jsonable_params(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in params.items()}


def paper_drawing(figure_id: str, *, quick: bool = False, seed: int = 0, **overrides: Any) -> tuple[Drawing, Any]:
    """Compute one paper figure, drawing nothing: ``(Drawing, Result)``; ``drawing()`` is the Figure
    of :func:`paper_figure` (``gradlab figures`` draws it in another process). Arguments as
    :func:`paper_figure`'s.

    Examples:
      >>> drawing, data = paper_drawing("rho2023_fig2", grid=8)
      >>> drawing.fn.__name__, data.mean.shape
      ('margin_multipliers', (8, 8))
    """
    (fid,) = figure_ids([figure_id])
    entry = FIGURES[fid]
    unknown = sorted(set(overrides) - set(entry.params))
    if unknown:
        raise ValueError(f"{fid} has no parameter {unknown[0]!r}; it takes {', '.join(entry.params) or 'none'}")
    params = {**entry.params, **overrides}
    drawing, data = entry.build(params, quick=quick, seed=seed)
    return drawing, dataclasses.replace(data, meta={**data.meta, "figure": fid, "paper": entry.paper,
                                                    "shows": entry.shows, "figure_params": _jsonable_params(params),
                                                    "quick": quick})


def paper_figure(figure_id: str, *, quick: bool = False, seed: int = 0, plot: bool = True, **overrides: Any):
    """Compute and draw one paper figure: ``(Figure, Result)``, as ``gradlab figures --only ID`` writes it.

    Args:
      figure_id: a key of ``FIGURES``, e.g. ``"li2024_fig2"``.
      quick: small grids and few batches (a smoke run).
      seed: root seed of the Monte-Carlo protocol (figures that simulate).
      plot: False returns ``(None, Result)`` without drawing.
      **overrides: replace entries of the figure's ``params`` (e.g. ``protocol=Protocol(grid=50)``
        for the simulated figures, ``grid=100`` for the norm and margin maps).

    Returns:
      The matplotlib Figure (None when ``plot`` is False) and the data as one ``Result``; its
      meta names the figure, the paper and the parameters.

    Examples:
      >>> fig, data = paper_figure("rho2023_fig2", grid=8)
      >>> data.dims, data.mean.shape, data.meta["figure"]
      (('theta_pos', 'q_pos'), (8, 8), 'rho2023_fig2')
    """
    drawing, data = paper_drawing(figure_id, quick=quick, seed=seed, **overrides)
    return (drawing() if plot else None), data


#: The (μ_pos, μ_neg) maps of ``component_figure`` (``gradlab heatmap --component``).
COMPONENTS = ("gd", "ratio", "weight", "norm")


def component_figure(loss, protocol=None, *, component: str = "gd", exact: bool = False,
                     gd_threshold: float = defaults.GD_THRESHOLD, part: str = "pos", progress=None,
                     plot: bool = True):
    """A (μ_pos, μ_neg) map of one paradigm component of any loss, computed and drawn
    (Li et al. 2024 Figs. 2, 4, 10): what ``gradlab heatmap`` writes.

    Args:
      loss: a registry name or a ``gradlab.Loss``.
      protocol: the ``gradlab.simulate.Protocol`` (default: the paper's).
      component: ``"gd"`` (``simulate.gd_map``; ``exact=True`` integrates), ``"ratio"``
        (``simulate.ratio_map``, cells with mean GD below ``gd_threshold`` shaded),
        ``"weight"`` (``simulate.weight_map``, the hardest negative's share over batches with
        GD at least ``gd_threshold``) or ``"norm"`` (Nie et al. 2023's closed-form norm at the
        mean angles, ``norms.norm_on_mu_grid``; ``part`` ``"pos"`` or ``"neg"``).
      progress: optional ``callable(done, total)`` of the Monte-Carlo statistics.
      plot: False returns ``(None, Result)`` without drawing.

    Returns:
      The matplotlib Figure (None when ``plot`` is False) and the map as a ``Result``.

    Raises:
      ValueError: an unknown component, or ``exact`` for another component than ``"gd"``.
    """
    from gradlab import norms, simulate

    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; choose from {', '.join(COMPONENTS)}")
    if exact and component != "gd":
        raise ValueError("exact applies to the gd component only (quadrature of MPT, MET, MAT)")
    protocol = simulate.Protocol() if protocol is None else protocol
    if component == "gd":
        result = simulate.gd_map(loss, protocol, exact=exact, progress=progress)
    elif component == "ratio":
        result = simulate.ratio_map(loss, protocol, gd_threshold=gd_threshold, progress=progress)
    elif component == "weight":
        result = simulate.weight_map(loss, protocol, gd_gate=gd_threshold, progress=progress)
    else:
        result = norms.norm_on_mu_grid(loss, protocol, part=part)
    if not plot:
        return None, result
    return draw_component(result, getattr(loss, "name", loss), component=component, gd_threshold=gd_threshold,
                          part=part), result


def draw_component(result, loss_name: str, *, component: str = "gd", gd_threshold: float = defaults.GD_THRESHOLD,
                   part: str = "pos", label: str | None = None):
    """The figure of :func:`component_figure` drawn from its computed ``Result``. ``label``: the
    loss's display name (default ``gradlab.plot.loss_title(loss_name)``, which reads the loss
    registry and so imports JAX; ``gradlab heatmap`` passes it to the process that draws)."""
    from gradlab.plot import gd_maps, heatmap, loss_title, panel_title, ratio_maps

    name = label or loss_title(loss_name)
    if component == "gd":
        return gd_maps([result], titles=[panel_title(result.meta, name)])
    if component == "ratio":
        return ratio_maps([result], titles=[panel_title(result.meta, name)])
    if component == "weight":
        return heatmap(result, quantity="weight", vmin=0, vmax=1,
                       title=f"{name}: hardest negative's share (GD ≥ {gd_threshold:g})")
    return heatmap(result, quantity="norm", vmin=0, title=f"{name}: ‖∇^{part}‖ at the mean angles")
