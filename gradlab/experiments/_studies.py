"""The named studies of Li et al. 2024 (Sec. 3.2, Figs. 1, 5–9; Sec. 4, Table 3) and of the papers it
builds on (Nie et al. 2023, Rho et al. 2023, Farina et al. 2023, Zhang et al. 2022) as lists of runs.

Every study's runs are built by :class:`Scale` from a loss dict and a seed, so a run two
studies share (the Eq. 5 baseline at m = 0.3, τ = 0.05, r = 1) has one id and runs once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gradlab import defaults
from gradlab.experiments._spec import RunSpec
from gradlab.real import CORPORA

__all__ = ["Scale", "CPU_RUN", "QUICK_RUN", "SIMCSE_RUN", "SIMCSE_QUICK_RUN", "SIMCSE_EVALS", "SIMCSE_LOSSES", "TABLE3_PAPER_BERT", "STUDIES", "study_runs", "baseline", "BASELINE", "SWEEPS", "QUICK_SWEEPS", "GD_ONE_M",
           "TABLE3_PAIRS", "TABLE3_CLAIMS", "NU_GRID", "NIE2023_LOSSES", "NIE2023_MPT_MARGINS", "RATIO_SWEEP",
           "TRAJECTORY_LOSSES", "table3_losses", "nu_losses", "RHO2023_TRANSFORMS", "rho2023_losses",
           "FARINA2023_LOSSES", "ZHANG2022_LOSSES", "DEFAULT_SEEDS"]

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
#: originals' ν, so these bracket the registry defaults (the first entry) by decades. The first grid
#: (up to ν^B = 5, ν^{V,2} = 10) had its dev optimum at the top edge with dev still rising: the grids
#: go four decades past it, so that a tuned ν inside the grid can be told from one at its edge.
NU_GRID = {"barlow_twins": ({"nu": 0.005}, {"nu": 0.05}, {"nu": 0.5}, {"nu": 5.0}, {"nu": 50.0}, {"nu": 500.0},
                            {"nu": 5000.0}, {"nu": 50000.0}),
           "vicreg": ({"nu1": 0.04, "nu2": 1.0}, {"nu1": 0.4, "nu2": 1.0}, {"nu1": 0.04, "nu2": 10.0},
                      {"nu1": 0.4, "nu2": 10.0}, {"nu1": 0.4, "nu2": 100.0}, {"nu1": 0.4, "nu2": 1000.0},
                      {"nu1": 0.4, "nu2": 10000.0}, {"nu1": 0.4, "nu2": 100000.0})}
#: Nie et al. 2023 Figs. 1 and 3: InfoNCE, its decoupled forms (alignment + uniformity, DCL), and MPT at
#: the margins of Fig. 3c–e (0.10, 0.23 = the best, 0.80).
NIE2023_LOSSES = ("infonce", "align_uniform", "dcl")
NIE2023_MPT_MARGINS = (0.1, 0.23, 0.8)
#: The ``simcse`` study: Table 3's reference and its four modified losses under SimCSE's recipe.
SIMCSE_LOSSES = (TABLE3_REFERENCE, *(modified for _, modified in TABLE3_PAIRS))
#: Li et al. 2024 Table 3, BERT-base column, STS avg. (Spearman × 100 over the seven STS tasks; InfoNCE's
#: from Gao et al. 2021, the modified losses' the mean of three runs).
TABLE3_PAPER_BERT = {"infonce": 76.25, "mb": 78.34, "mv": 78.24, "mmhe": 78.40, "mmhs": 78.27}
#: Rho et al. 2023's gradient-scaling transforms of InfoNCE (Sec. 5, Algorithms 1, 3, 4; Eqs. 8–11) at
#: their defaults (SimCLR on CIFAR-10, App. C: τ = 0.25, β = 1, s = 1.125, m1 = 0.2, curvature s = 2.5,
#: c = 0.7), trained on the sentence setting: "none" is the untransformed InfoNCE with β, the control.
RHO2023_TRANSFORMS = ("none", "emphasize", "ratio", "curvature")
#: Farina et al. 2023: Barlow Twins (Pearson form, Eq. 2) and VICReg (Eq. 3) sentence embeddings against
#: the contrastive baseline (SimCSE's InfoNCE), each at its registry defaults.
FARINA2023_LOSSES = ("infonce", "barlow_twins_pearson", "vicreg_nc")
#: Zhang et al. 2022's collapse account through m_o and m_r: a loss that collapses at its defaults on this
#: setting (Barlow Twins and VICReg in Li et al. 2024's form, Table 3's default ν) against InfoNCE.
ZHANG2022_LOSSES = ("infonce", "barlow_twins", "vicreg")
#: Seeds per configuration: every claim a test decides has at least this many per arm.
DEFAULT_SEEDS = 5
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


#: The CPU default of every run (the light encoder, 100 steps of N = 64) and the ``--quick`` smoke preset.
CPU_RUN = RunSpec(steps=100, eval_every=25, monitor_every=5, max_sentences=20000)
QUICK_RUN = RunSpec(steps=20, max_sentences=2000, eval_every=10, monitor_every=2, dev_pairs=500, heldout_max=256)
#: The ``simcse`` study's runs: SimCSE's unsupervised recipe (Gao et al. 2021: MLP over [CLS] in training,
#: ``cls_before_pooler`` in evaluation from state 0 on, 32-token sentences, N = 64, τ = 0.05, lr 3e-5) on
#: all-MiniLM-L6-v2, cut to 40 steps so that its 25 runs fit a 2-core CPU (the recipe trains one epoch of
#: 10^6 sentences, 15,625 steps); STS-B dev at states 0, 5, ..., 40 (nine evaluations). The model's own
#: mean pooling (``RunSpec(pooling="avg")``, SimCSE's ``--pooler_type avg``) cannot test the modified
#: losses on this model: their gate d_i (m = 0.3) is open for 0.6 % of the anchors at state 0 (99.5 %
#: under the recipe's pooling; ``examples/experiments/results/simcse_state0.json``), so their gradient
#: comes from a handful of sentences a batch. The held-out analysis uses 256 sentences.
#: Dev evaluations after state 0 in a simcse run (``Scale.make(study="simcse", steps=S)``: every S // 8 steps).
SIMCSE_EVALS = 8
SIMCSE_RUN = RunSpec(encoder="minilm", recipe="simcse-unsup", steps=40, eval_every=5, monitor_every=4,
                     max_sentences=20000, heldout_max=256)
SIMCSE_QUICK_RUN = RunSpec(encoder="minilm", recipe="simcse-unsup", steps=4, batch_size=16, max_sentences=2000,
                           eval_every=2, monitor_every=2, dev_pairs=100, heldout_max=32, eval_test=False)


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big every run of a study is: a run template, the seeds, and the sweep values.

    Attributes:
      run: the template :class:`RunSpec` (its loss and seed are replaced per run).
      seeds: seeds 0 .. seeds − 1.
      quick: the smoke mode (fewer sweep values, see ``QUICK_SWEEPS``).
      values: Fig. 6 values replacing a component's list.

    Examples:
      >>> Scale().run.encoder, Scale().run.steps, Scale().seeds
      ('light', 100, 5)
    """

    run: RunSpec = CPU_RUN
    seeds: int = DEFAULT_SEEDS
    quick: bool = False
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self):
        if not isinstance(self.run, RunSpec):
            raise TypeError(f"run must be a RunSpec; got {type(self.run).__name__}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, numbers.Integral) or self.seeds < 1:
            raise ValueError(f"seeds must be an integer >= 1; got {self.seeds!r}")
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
    def make(cls, *, study: str | None = None, quick: bool = False, seeds: int | None = None,
             values: dict[str, tuple[float, ...]] | None = None, **run: Any) -> Scale:
        """A study's default scale (or its ``--quick`` preset), with the given overrides.

        Args:
          study: ``"simcse"`` starts from its recipe runs (``SIMCSE_RUN``); any other from the
            CPU default (``CPU_RUN``).
          quick: the smoke preset (1 seed, a few steps).
          seeds: seeds per configuration.
          values: Fig. 6 values per component.
          **run: any :class:`RunSpec` field (``encoder``, ``steps``, ``batch_size``, ``lr``,
            ``corpus``, ``senteval``, ...; None leaves it). The simcse study on a corpus file is the
            paper's setting (Gao et al. 2021): all of the file, one epoch of it in the recipe's batch
            size for the encoder (``--quick``: its few steps), STS-B dev every 250 steps. With ``steps`` changed, dev is evaluated 4 times (the simcse study:
            ``SIMCSE_EVALS`` times, so that its claims can see a dev curve turn) and the monitor
            records 20 times; with ``batch_size`` changed, the samples grow to fit it. A
            changed encoder drops the preset's learning rate (the encoder's own applies).

        Examples:
          >>> Scale.make(quick=True, steps=40).run.eval_every
          10
        """
        simcse = study == "simcse"
        base = (SIMCSE_QUICK_RUN if quick else SIMCSE_RUN) if simcse else (QUICK_RUN if quick else CPU_RUN)
        changes = {k: v for k, v in run.items() if v is not None}
        if simcse and changes.get("corpus", base.corpus) not in CORPORA:
            changes = _paper_setting(base, changes, quick)
        if "steps" in changes:
            steps = RunSpec(steps=changes["steps"]).steps  # validated
            changes.setdefault("eval_every", max(1, steps // (SIMCSE_EVALS if simcse else 4)))
            changes.setdefault("monitor_every", max(1, steps // 20))
        if "batch_size" in changes:
            b = changes["batch_size"]
            changes.setdefault("max_sentences", max(base.max_sentences, b))
            changes.setdefault("heldout_max", max(base.heldout_max, 4 * b))
        if "encoder" in changes and "lr" not in changes:
            changes["lr"] = None
        if simcse and changes.get("encoder") == "light":
            raise ValueError("the simcse study trains a transformer: --encoder minilm or a checkpoint PATH")
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(RunSpec)}
        if "encoder" in changes:
            fields["encoder_sha256"] = None
        template = RunSpec(**{**fields, **changes})
        extra: dict[str, Any] = {"quick": quick}
        if seeds is not None or quick:
            extra["seeds"] = 1 if seeds is None else seeds
        if values:
            extra["values"] = tuple((k, tuple(float(x) for x in v)) for k, v in sorted(values.items()))
        return cls(run=template, **extra)

    def spec(self, loss: Any, seed: int) -> RunSpec:
        """The RunSpec of ``loss`` at this scale and ``seed``."""
        return self.run.replace(loss=loss, seed=seed)

    def sweeps(self) -> dict[str, tuple[float, ...]]:
        """Fig. 6's values per component (``QUICK_SWEEPS`` in quick mode; ``values`` replace a list)."""
        return {**(QUICK_SWEEPS if self.quick else SWEEPS), **dict(self.values)}

    def to_dict(self) -> dict[str, Any]:
        """The run template's sizes, the seeds and the sweep values (what a study's numbers record); a path
        named by its content (checkpoint, corpus file, SentEval) by its last component only."""
        run = self.run.to_dict()
        run.pop("loss"), run.pop("seed")
        for field in ("encoder", "corpus", "senteval"):
            if run.get(f"{field}_sha256"):
                run[field] = Path(run[field]).name
        return {**run, "seeds": self.seeds, "quick": self.quick, "values": [list(v) for v in self.values]}


def _paper_setting(base: RunSpec, changes: dict[str, Any], quick: bool) -> dict[str, Any]:
    """A simcse study's changes on a corpus file (unless ``quick`` or given): all of it, one epoch in the
    recipe's batch size for the encoder, STS-B dev every 250 steps (Gao et al. 2021, App. A)."""
    from gradlab.real.recipe import simcse_unsup_settings

    if quick:  # its 2,000 sentences sampled from the file
        return changes
    changes = {**changes, "max_sentences": changes.get("max_sentences")}
    encoder = changes.get("encoder", base.encoder)
    settings = simcse_unsup_settings(encoder, changes["corpus"], batch_size=changes.get("batch_size"))
    batch = changes.setdefault("batch_size", settings["batch_size"])
    heldout = changes.get("heldout_max", base.heldout_max)
    steps = changes.setdefault("steps", max(1, defaults.SIMCSE_EPOCHS * (settings["lines"] - heldout) // batch))
    changes.setdefault("eval_every", settings["eval_every"])
    changes.setdefault("monitor_every", max(1, steps // 20))
    return changes


def nu_losses(name: str) -> list[dict[str, Any]]:
    """The loss dicts of ``NU_GRID[name]`` (the first one is the registry default)."""
    return [{"loss": name, "params": dict(p)} for p in NU_GRID[name]]


def rho2023_losses() -> list[dict[str, Any]]:
    """The loss dicts of ``RHO2023_TRANSFORMS`` (``{"loss": "transform:NAME"}``, Rho et al. 2023's defaults)."""
    return [{"loss": f"transform:{name}"} for name in RHO2023_TRANSFORMS]


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
    if study == "rho2023":
        return rho2023_losses()
    if study == "farina2023":
        return list(FARINA2023_LOSSES)
    if study == "zhang2022":
        return list(ZHANG2022_LOSSES)
    if study == "simcse":
        if scale.run.recipe != "simcse-unsup":
            raise ValueError("the simcse study runs SimCSE's recipe: build its scale with Scale.make(study='simcse')")
        return list(SIMCSE_LOSSES)
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
    "rho2023": "Rho et al. 2023's gradient-scaling transforms of InfoNCE (none, emphasize, ratio, curvature) "
               "on the sentence setting",
    "farina2023": "Farina et al. 2023: Barlow Twins and VICReg sentence embeddings (their forms) against InfoNCE",
    "zhang2022": "Zhang et al. 2022: the center / residual ratios m_o and m_r over training, collapsing losses "
                 "against InfoNCE",
    "trajectory": "a run's monitored (μ_pos, μ_neg) path on the simulated GD and ratio maps of its loss",
    "simcse": "Table 3's InfoNCE vs mB, mV, mMHE, mMHS under SimCSE's unsupervised recipe on a transformer "
              "(MiniLM by default; any BERT / RoBERTa checkpoint with --encoder PATH)",
    "all": "every study but simcse (the recipe's runs have their own scale: run it on its own)",
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
        specs = [s for name in STUDIES if name not in ("all", "simcse") for s in study_runs(name, scale, losses=losses)]
        return list({s.id: s for s in specs}.values())
    seeds = [0] if study == "trajectory" else range(scale.seeds)
    chosen = losses if study == "trajectory" and losses else _losses(study, scale)
    return [scale.spec(loss, seed) for loss in chosen for seed in seeds]
