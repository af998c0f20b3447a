"""The named studies of Li et al. 2024 (Sec. 3.2, Figs. 1, 5–9; Sec. 4, Table 3) as lists of runs.

Every study's runs are built by :class:`Scale` from a loss dict and a seed, so a run two
studies share (the Eq. 5 baseline at m = 0.3, τ = 0.05, r = 1) has one id and runs once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

from gradlab.experiments._spec import RunSpec

__all__ = ["Scale", "STUDIES", "study_runs", "baseline", "BASELINE", "SWEEPS", "QUICK_SWEEPS", "GD_ONE_M",
           "TABLE3_PAIRS", "TABLE3_CLAIMS", "NU_GRID", "NIE2023_LOSSES", "NIE2023_MPT_MARGINS", "RATIO_SWEEP",
           "TRAJECTORY_LOSSES", "table3_losses", "nu_losses"]

#: Li et al. 2024 Eq. 5 with its defaults (Sec. 3.2): GD = 1[c_p − max c_k < m], W = softmax(c/τ), R = r.
BASELINE = {"m": 0.3, "tau": 0.05, "r": 1.0}
#: Fig. 6: one component varied at a time around the baseline.
SWEEPS = {"m": (0.3, 0.4, 0.5, 0.7, 1.0), "tau": (0.01, 0.03, 0.05, 0.1, 0.3, 1.0, 3.0),
          "r": (0.25, 0.5, 1.0, 1.5, 2.0)}
#: ``--quick``: the ends and the middle of each list (fits the 2-minute smoke budget).
QUICK_SWEEPS = {"m": (0.3, 0.5, 1.0), "tau": (0.01, 0.05, 0.3, 3.0), "r": (0.25, 1.0, 2.0)}
#: Fig. 5, "GD ≡ 1": c_p − max c_k ≤ 2 < m for unit vectors, so the gate is always open.
GD_ONE_M = 4.0
#: Fig. 8c: the static ratio r.
RATIO_SWEEP = (0.5, 1.0, 1.5, 2.0)
#: Table 3 / Fig. 1: (original, modified); InfoNCE is the reference.
TABLE3_PAIRS = (("barlow_twins", "mb"), ("vicreg", "mv"), ("align_mhe", "mmhe"), ("align_mhs", "mmhs"))
TABLE3_REFERENCE = "infonce"
#: Table 3's other claims, (weaker, stronger): ArcCon beats InfoNCE, MET beats MPT (Li et al. 2024 Table 3).
TABLE3_CLAIMS = (("infonce", "arccon"), ("mpt", "met"))
#: Barlow Twins' ν^B and VICReg's (ν^{V,1}, ν^{V,2}) tried for Table 3's originals: *ours*. Li et al. 2024
#: App. A.4 grid-searches only the modified losses (batch size, lr, m, τ, r); it gives no grid for the
#: originals' ν, so these bracket the registry defaults (the first entry) by decades.
NU_GRID = {"barlow_twins": ({"nu": 0.005}, {"nu": 0.05}, {"nu": 0.5}, {"nu": 5.0}),
           "vicreg": ({"nu1": 0.04, "nu2": 1.0}, {"nu1": 0.4, "nu2": 1.0}, {"nu1": 0.04, "nu2": 10.0},
                      {"nu1": 0.4, "nu2": 10.0})}
#: Nie et al. 2023 Figs. 1 and 3: InfoNCE, its decoupled forms (alignment + uniformity, DCL), and MPT at
#: the margins of Fig. 3c–e (0.10, 0.23 = the best, 0.80).
NIE2023_LOSSES = ("infonce", "align_uniform", "dcl")
NIE2023_MPT_MARGINS = (0.1, 0.23, 0.8)
#: Runs drawn on their own simulated maps by ``trajectory``.
TRAJECTORY_LOSSES = ("baseline", "arccon")


def baseline(**changes: float) -> dict[str, Any]:
    """The Eq. 5 baseline's loss dict with some parameters changed.

    Examples:
      >>> baseline(tau=0.1)["params"]
      {'m': 0.3, 'tau': 0.1, 'r': 1.0}
    """
    unknown = set(changes) - set(BASELINE)
    if unknown:
        raise ValueError(f"the baseline has parameters m, tau, r; got {sorted(unknown)}")
    return {"loss": "baseline", "params": {**BASELINE, **{k: float(v) for k, v in changes.items()}}}


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big every run of a study is (CPU defaults: the light encoder, 100 steps, 3 seeds).

    Attributes:
      encoder: ``"light"`` or ``"minilm"``.
      steps, batch_size, seeds: optimizer steps, N, and seeds 0 .. seeds − 1.
      max_sentences: training sentences per run (seeded sample of the non-held-out corpus).
      eval_every, monitor_every: STS-B dev and ParadigmMonitor periods (steps).
      dev_pairs: dev pairs for checkpoint selection (None: all 1,500).
      heldout_max: held-out sentences analyzed before / after training.
      lr: Adam learning rate (None: the encoder's default).
      quick: the smoke mode (fewer sweep values, see ``QUICK_SWEEPS``).
    """

    encoder: str = "light"
    steps: int = 100
    batch_size: int = 64
    seeds: int = 3
    max_sentences: int = 20000
    eval_every: int = 25
    monitor_every: int = 5
    dev_pairs: int | None = None
    heldout_max: int = 1024
    lr: float | None = None
    quick: bool = False
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self):
        for comp, vals in self.values:
            if comp not in SWEEPS:
                raise ValueError(f"values: unknown component {comp!r}; choose from {', '.join(SWEEPS)}")
            if not vals:
                raise ValueError(f"values: {comp} needs at least one value")
            for v in vals:
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0 or (
                        comp == "tau" and v == 0):
                    raise ValueError(f"values: {comp}={v!r} is not a valid {comp} (finite, >= 0; tau > 0)")

    @classmethod
    def make(cls, *, quick: bool = False, encoder: str | None = None, steps: int | None = None,
             batch_size: int | None = None, seeds: int | None = None,
             values: dict[str, tuple[float, ...]] | None = None) -> Scale:
        """The CPU default or the ``--quick`` preset, with the given overrides.

        With ``steps`` overridden, dev is evaluated 4 times and the monitor records 20 times.
        """
        base = cls(steps=20, seeds=1, max_sentences=2000, eval_every=10, monitor_every=2, dev_pairs=500,
                   heldout_max=256, quick=True) if quick else cls()
        changes: dict[str, Any] = {}
        for name, v, low in (("steps", steps, 1), ("batch_size", batch_size, 2), ("seeds", seeds, 1)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}; got {v!r}")
            changes[name] = int(v)
        if encoder is not None:
            if encoder not in ("light", "minilm"):
                raise ValueError(f"unknown encoder {encoder!r}; choose from light, minilm")
            changes["encoder"] = encoder
        if values:
            changes["values"] = tuple((k, tuple(float(x) for x in v)) for k, v in sorted(values.items()))
        if "steps" in changes:
            changes["eval_every"] = max(1, changes["steps"] // 4)
            changes["monitor_every"] = max(1, changes["steps"] // 20)
        if "batch_size" in changes:
            b = changes["batch_size"]
            changes["max_sentences"] = max(base.max_sentences, b)
            changes["heldout_max"] = max(base.heldout_max, 4 * b)
        return dataclasses.replace(base, **changes)

    def spec(self, loss: Any, seed: int) -> RunSpec:
        """The RunSpec of ``loss`` at this scale and ``seed``."""
        return RunSpec(loss=loss, encoder=self.encoder, seed=seed, steps=self.steps, batch_size=self.batch_size,
                       lr=self.lr, eval_every=self.eval_every, monitor_every=self.monitor_every,
                       max_sentences=self.max_sentences, dev_pairs=self.dev_pairs, heldout_max=self.heldout_max)

    def sweeps(self) -> dict[str, tuple[float, ...]]:
        """Fig. 6's values per component (``QUICK_SWEEPS`` in quick mode; ``values`` replace a list)."""
        return {**(QUICK_SWEEPS if self.quick else SWEEPS), **dict(self.values)}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def nu_losses(name: str) -> list[dict[str, Any]]:
    """The loss dicts of ``NU_GRID[name]`` (the first one is the registry default)."""
    return [{"loss": name, "params": dict(p)} for p in NU_GRID[name]]


def table3_losses() -> list[Any]:
    """Table 3's runs: the reference, the four (original, modified) pairs, the other claims, the ν grids."""
    names = [TABLE3_REFERENCE, *(n for pair in (*TABLE3_PAIRS, *TABLE3_CLAIMS) for n in pair)]
    grid = [loss for name in NU_GRID for loss in nu_losses(name)[1:]]
    return list(dict.fromkeys(names)) + grid


def _losses(study: str, scale: Scale) -> list[Any]:
    if study == "fig6":
        return [baseline(**{k: v}) for k, values in scale.sweeps().items() for v in values]
    if study == "fig5":
        return [baseline(), baseline(m=GD_ONE_M)]
    if study in ("fig7", "fig9"):
        return [baseline()]
    if study == "fig8":
        return [baseline(), "arccon", "met", *(baseline(r=r) for r in RATIO_SWEEP)]
    if study == "table3":
        return table3_losses()
    if study == "fig1":
        return [TABLE3_REFERENCE, *(name for pair in TABLE3_PAIRS for name in pair)]
    if study == "nie2023":
        return [*NIE2023_LOSSES, *({"loss": "mpt", "params": {"m": m}} for m in NIE2023_MPT_MARGINS)]
    if study == "trajectory":
        return [baseline() if n == "baseline" else n for n in TRAJECTORY_LOSSES]
    raise ValueError(f"unknown study {study!r}; choose from {', '.join(STUDIES)}")


#: Study name -> one line on what it shows. ``all`` is every other study.
STUDIES = {
    "fig6": "STS-B dev against m, τ, r of the Eq. 5 baseline, one component varied at a time",
    "fig5": "baseline vs GD ≡ 1: held-out anchor–positive / anchor–negative cosines",
    "fig7": "the hardest negative's share of W per τ, before and after baseline training",
    "fig8": "(a) Lemma-1 minimum ratios before / after, (b) ArcCon and MET ratios over steps, "
            "(c) anchor–positive cosine over steps per r",
    "fig9": "monitored μ_pos, μ_neg, σ_pos, σ_neg over baseline training",
    "table3": "original vs modified losses (Table 3), InfoNCE the reference; ArcCon vs InfoNCE, MET vs MPT; "
              "Barlow Twins' and VICReg's ν tuned on dev",
    "fig1": "Table 3's numbers as bars, original vs modified",
    "nie2023": "Nie et al. 2023 Figs. 1 and 3: alignment, uniformity and the distance gap over training for "
               "InfoNCE, its decoupled forms and MPT at three margins",
    "trajectory": "a run's monitored (μ_pos, μ_neg) path on the simulated GD and ratio maps of its loss",
    "all": "every study",
}


def study_runs(study: str, scale: Scale, *, losses: Sequence[Any] | None = None) -> list[RunSpec]:
    """The runs of a study at a scale (``trajectory`` uses seed 0 only).

    ``losses`` replaces ``trajectory``'s losses (``TRAJECTORY_LOSSES``) with any loss dicts
    or names (``RunSpec.loss``), e.g. ``{"user": "my_losses.py:focal"}``.

    Examples:
      >>> runs = study_runs("fig5", Scale.make(quick=True))
      >>> [r.loss["params"]["m"] for r in runs]
      [0.3, 4.0]
    """
    if study == "all":
        specs = [s for name in STUDIES if name != "all" for s in study_runs(name, scale, losses=losses)]
        return list({s.id: s for s in specs}.values())
    seeds = [0] if study == "trajectory" else range(scale.seeds)
    chosen = losses if study == "trajectory" and losses else _losses(study, scale)
    return [scale.spec(loss, seed) for loss in chosen for seed in seeds]
