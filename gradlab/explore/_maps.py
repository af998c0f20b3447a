"""The explorer's numbers: slider values -> the four maps, each computed by ``gradlab.simulate``.

A ``View`` is everything the page shows: the loss (as ``gradlab.resolve_loss`` reads it), the
loss's parameters, λ and r of the Lemma-1 panel, and the Monte-Carlo protocol. ``view_maps``
computes its four panels with the very calls ``gradlab heatmap`` and ``gradlab lemma1`` make
(``heatmap_command`` / ``lemma1_command`` print those commands), so the page, an export and
the command line agree number for number:

- ``gd``: ``simulate.gd_map`` (Li et al. 2024 Figs. 2, 10);
- ``weight``: ``simulate.weight_map`` with ``gd_gate = gd_threshold``, the hardest negative's
  share of W (Fig. 3 over the whole grid; losses with a temperature τ only);
- ``ratio``: ``simulate.ratio_map``, the effective ratio, masked where μ_pos > μ_neg or GD is
  below ``gd_threshold`` (Fig. 4);
- ``lemma1``: ``simulate.lemma1_map`` at λ and r: the fraction of batches in which the static
  ratio r satisfies Lemma 1 (computed ``LEMMA1_CHUNK`` grid rows at a time: faster, same fractions).

Each map is cached on what it depends on: moving λ recomputes the Lemma-1 panel alone, moving τ
the three maps of the loss alone. Nothing here draws.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gradlab import defaults

__all__ = ["View", "SliderSpec", "PANELS", "LIVE", "simulable_losses", "view_protocol", "view_loss", "view_maps",
           "panel_results", "slider_specs", "heatmap_command", "lemma1_command", "view_commands"]

#: The four panels, in page order: key -> title.
PANELS = {
    "gd": "gradient dissipation GD",
    "weight": "hardest negative's share of W",
    "ratio": "effective ratio R",
    "lemma1": "Lemma 1: fraction of batches r satisfies",
}

#: The explorer's live protocol: 50 × 50 cells, 200 batches of 128 (the paper's: 100 × 100, 1000).
LIVE = {"grid": 50, "batches": 200, "batch_size": defaults.BATCH_SIZE}
#: r of the Lemma-1 panel when the loss has no static ratio of its own.
LEMMA1_R = 1.5
#: Grid rows per compiled step of the Lemma-1 panel (``Protocol.chunk``). The engine's own choice
#: (the whole grid in one step) takes 3-4x longer on a 2-core CPU (benchmarks/explore.py); the
#: fractions drawn are the same, the mean minimum ratio r_low can differ in its last bit.
LEMMA1_CHUNK = 5

#: Slider ranges (start, end, step) by parameter name; any other parameter gets 0 .. 2 × its default.
RANGES = {
    "tau": (0.01, 0.5, 0.005),
    "m": (0.0, 1.0, 0.01),
    "r": (0.0, 3.0, 0.05),
    "lam": (0.01, 1.0, 0.01),
    "u": (0.0, round(math.pi / 4, 4), 0.005),
    "width": (0.005, 0.5, 0.005),
}
#: Slider labels: the papers' symbols.
LABELS = {"tau": "τ", "lam": "λ", "m": "m", "r": "r", "u": "u", "beta": "β", "width": "width"}


@dataclasses.dataclass(frozen=True)
class View:
    """What the explorer shows: a loss at some parameters, Lemma 1 at (λ, r), and the protocol.

    Attributes:
      loss: anything ``gradlab.resolve_loss`` reads as text: a registered name,
        ``compose:gd=...,weight=...,ratio=...`` or ``FILE.py:FUNCTION``.
      params: the loss parameters set so far, as sorted ``(name, value)`` pairs (the others
        keep the loss's defaults).
      lam: λ, the step size of Lemma 1 (Li et al. 2024).
      r: the static ratio the Lemma-1 panel tests; the loss's own ``r`` when it has one.
      grid, batches, batch_size, seed: the live ``Protocol`` (50 × 50, 200 batches of 128).
      full: the paper's protocol instead (100 × 100 cells, 1000 batches of 128).
      gd_threshold: cells (ratio) and batches (share) with GD below it do not count.
    """

    loss: str = "infonce"
    params: tuple[tuple[str, float], ...] = ()
    lam: float = defaults.LEMMA1_LAM
    r: float = LEMMA1_R
    grid: int = LIVE["grid"]
    batches: int = LIVE["batches"]
    batch_size: int = LIVE["batch_size"]
    seed: int = 0
    full: bool = False
    gd_threshold: float = defaults.GD_THRESHOLD

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(sorted((str(k), float(v)) for k, v in dict(self.params).items())))
        for name in ("lam", "r", "gd_threshold"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number; got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.lam <= 0:
            raise ValueError(f"lam must be > 0; got {self.lam:g}")
        if "r" in dict(self.params):
            object.__setattr__(self, "r", dict(self.params)["r"])

    def set(self, **values: float) -> View:
        """A copy with slider values changed: ``lam``, ``r`` (also the loss's ``r``, if it has
        one), and any loss parameter by name (``tau``, ``m``, ``u``, ...).

        Examples:
          >>> View("met").set(m=0.3, lam=0.5).params
          (('m', 0.3),)
        """
        lam = float(values.pop("lam", self.lam))
        r = float(values.pop("r", self.r))
        params = dict(self.params)
        params.update({k: float(v) for k, v in values.items()})
        if "r" in view_loss(dataclasses.replace(self, params=())).params:
            params["r"] = r
        return dataclasses.replace(self, params=tuple(params.items()), lam=lam, r=r)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields (the export's metadata)."""
        d = dataclasses.asdict(self)
        d["params"] = dict(self.params)
        return d


def simulable_losses() -> list[str]:
    """The registered losses the engine simulates from angles (the page's loss menu).

    Examples:
      >>> simulable_losses()[:3]
      ['infonce', 'arccon', 'mpt']
    """
    from gradlab.losses import get_spec, list_losses

    return [n for n in list_losses() if get_spec(n).kind == "cosine"]


def view_protocol(view: View):
    """The ``gradlab.simulate.Protocol`` of a view: the live one, or the paper's with ``full``."""
    from gradlab.simulate import Protocol

    if view.full:
        return Protocol(seed=view.seed)
    return Protocol(grid=view.grid, batches=view.batches, batch_size=view.batch_size, seed=view.seed)


def view_loss(view: View):
    """The view's ``gradlab.Loss``, through ``gradlab.resolve_loss`` (one-line errors)."""
    loss = _resolved(view.loss, view.params)
    if loss.spec.kind != "cosine":
        raise ValueError(f"{loss.name} has no angle form, so the explorer cannot simulate it; "
                         f"choose from {', '.join(simulable_losses())}, a composition or a function of the cosines")
    return loss


@functools.lru_cache(maxsize=64)
def _resolved(text: str, params: tuple[tuple[str, float], ...]):
    from gradlab.design import resolve_loss

    return resolve_loss(text, params=dict(params))


@functools.lru_cache(maxsize=16)
def _loss_maps(text: str, params: tuple, protocol, gd_threshold: float) -> dict:
    from gradlab import simulate

    loss = _resolved(text, params)
    maps = {"gd": simulate.gd_map(loss, protocol),
            "ratio": simulate.ratio_map(loss, protocol, gd_threshold=gd_threshold)}
    maps["weight"] = simulate.weight_map(loss, protocol, gd_gate=gd_threshold) if "tau" in loss.params else None
    return maps


@functools.lru_cache(maxsize=16)
def _lemma1(protocol, lam: float, r: float):
    from gradlab import simulate

    return simulate.lemma1_map(protocol.replace(chunk=protocol.chunk or LEMMA1_CHUNK), lam=lam, ratios=[r])


def view_maps(view: View) -> dict[str, Any]:
    """The view's maps as ``gradlab.io.Result``s: ``gd``, ``weight`` (None for a loss without τ),
    ``ratio`` and ``lemma1`` (``simulate.lemma1_map`` at λ with ratios ``[r]``).

    Examples:
      >>> maps = view_maps(View("infonce", grid=4, batches=8, batch_size=8))
      >>> sorted(maps), maps["gd"].mean.shape
      (['gd', 'lemma1', 'ratio', 'weight'], (4, 4))
    """
    view_loss(view)  # the angle-form check, one line
    protocol = view_protocol(view)
    return {**_loss_maps(view.loss, view.params, protocol, view.gd_threshold),
            "lemma1": _lemma1(protocol, view.lam, view.r)}


def panel_results(maps: Mapping[str, Any]) -> dict[str, Any]:
    """What each panel draws, as a (μ_pos, μ_neg) ``Result`` (None where the panel is empty): the
    GD, share and ratio maps as computed, and Lemma 1's ``satisfied`` fraction at the view's r."""
    from gradlab.io import Result

    out = {k: maps[k] for k in ("gd", "weight", "ratio")}
    lem = maps["lemma1"]
    out["lemma1"] = Result(dims=("mu_pos", "mu_neg"), coords=dict(lem.coords), mean=np.asarray(lem.extra["satisfied"])[0],
                           meta={**lem.meta, "panel": "satisfied", "r": float(np.asarray(lem.coords["r"])[0])})
    return out


@dataclasses.dataclass(frozen=True)
class SliderSpec:
    """One slider: the parameter it sets, its label, range, step and value."""

    name: str
    label: str
    start: float
    end: float
    step: float
    value: float


def _spec(name: str, value: float) -> SliderSpec:
    if name in RANGES:
        start, end, step = RANGES[name]
    else:
        end = max(1.0, 2 * abs(value))
        start, step = (-end if value < 0 else 0.0), end / 200
    return SliderSpec(name, LABELS.get(name, name), start, max(end, value), step, value)


def slider_specs(view: View) -> list[SliderSpec]:
    """The sliders of a view: the loss's own parameters (τ, m, u, ...) in its order, then r and λ.

    Examples:
      >>> [s.label for s in slider_specs(View("arccon"))]
      ['τ', 'u', 'r', 'λ']
    """
    loss = view_loss(view)
    specs = [_spec(k, float(v)) for k, v in loss.params.items() if k != "r"]
    return [*specs, _spec("r", view.r), _spec("lam", view.lam)]


def _number(v: float) -> str:
    """A float as text that ``gradlab``'s option parser reads back to the very same value."""
    short = f"{v:g}"
    return short if float(short) == v else repr(float(v))


def _protocol_args(view: View) -> list[str]:
    p = view_protocol(view)
    return ["--grid", str(p.grid_shape[0]), "--batches", str(p.batches), "--batch-size", str(p.batch_size),
            "--seed", str(p.seed)]


def _loss_args(view: View) -> list[str]:
    text = view.loss.strip()
    if text.startswith("compose:"):
        args = ["--compose", text[len("compose:"):]]
    else:
        source, _, attr = text.rpartition(":")
        args = ["--loss", f"{Path(source).expanduser().resolve()}:{attr}" if source.endswith(".py") else text]
    for k, v in view.params:
        args += ["--param", f"{k}={_number(v)}"]
    return args


def heatmap_command(view: View, component: str) -> str:
    """The ``gradlab heatmap`` command that computes the ``gd``, ``weight`` or ``ratio`` panel.

    Examples:
      >>> heatmap_command(View("infonce").set(tau=0.1), "gd")
      'gradlab heatmap --loss infonce --param tau=0.1 --component gd --grid 50 --batches 200 --batch-size 128 --seed 0'
    """
    if component not in ("gd", "weight", "ratio"):
        raise ValueError(f"heatmap_command draws gd, weight or ratio; got {component!r}")
    args = ["gradlab", "heatmap", *_loss_args(view), "--component", component, *_protocol_args(view)]
    if component != "gd" and view.gd_threshold != defaults.GD_THRESHOLD:
        args += ["--gd-threshold", _number(view.gd_threshold)]
    return shlex.join(args)


def lemma1_command(view: View) -> str:
    """The ``gradlab lemma1`` command whose ``lemma1_map`` is the Lemma-1 panel (its ``satisfied``).

    Examples:
      >>> lemma1_command(View(lam=0.2, r=1.25))
      'gradlab lemma1 --lambda 0.2 --ratio 1.25 --grid 50 --batches 200 --batch-size 128 --seed 0'
    """
    return shlex.join(["gradlab", "lemma1", "--lambda", _number(view.lam), "--ratio", _number(view.r),
                       *_protocol_args(view)])


def view_commands(view: View) -> dict[str, str | None]:
    """Every panel's command (None for an empty share panel: the loss has no τ)."""
    has_tau = "tau" in view_loss(view).params
    return {"gd": heatmap_command(view, "gd"), "weight": heatmap_command(view, "weight") if has_tau else None,
            "ratio": heatmap_command(view, "ratio"), "lemma1": lemma1_command(view)}
