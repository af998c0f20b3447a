"""The claims of the papers Li et al. 2024 builds on, each on the closest setting this machine runs:
Nie et al. 2023 (gradient dissipation, Figs. 1 and 3), Rho et al. 2023 (the gradient-scaling
transforms) and Farina et al. 2023 (Barlow Twins and VICReg sentence embeddings).

Every row states how far its setting is from the paper's. Comparisons are paired over the seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradlab.experiments._build_components import LIGHT_SETTING
from gradlab.experiments._build_table3 import dev_test_claim, never_trained
from gradlab.experiments._studies import (
    FARINA2023_LOSSES,
    NIE2023_LOSSES,
    NIE2023_MPT_MARGINS,
    TABLE3_REFERENCE,
    rho2023_losses,
)
from gradlab.experiments._tables import (
    RUN_KEYS,
    Context,
    ci_half,
    export,
    failures,
    first,
    fmt,
    label,
    last,
    mean_sd,
    row_table,
    stacked,
    values,
)
from gradlab.experiments.stats import EQUIVALENCE_MARGIN, compare, equivalence, paired_t

__all__ = ["build_nie2023", "build_rho2023", "build_farina2023"]


def build_nie2023(ctx: Context) -> None:
    """Nie et al. 2023 Figs. 1b–d and 3: alignment, uniformity and the distance gap while each loss trains."""
    from gradlab import plot

    losses: list[Any] = [*NIE2023_LOSSES, *({"loss": "mpt", "params": {"m": m}} for m in NIE2023_MPT_MARGINS)]
    rows, panels = [], {"alignment": {}, "uniformity": {}, "distance gap": {}}
    for loss in losses:
        name = label(loss) if isinstance(loss, str) else f"MPT (m = {loss['params']['m']:g})"
        key = loss if isinstance(loss, str) else f"mpt[m={loss['params']['m']:g}]"
        runs = ctx.runs(loss)
        export(ctx, key, runs, {**RUN_KEYS, "distance_gap_last": last("distance_gap"),
                                "distance_gap_first": first("distance_gap")})
        for panel, stat in zip(panels.values(), ("align", "uniform", "distance_gap"), strict=True):
            steps, mean, half, _ = stacked(runs, stat)
            panel[name] = (steps, mean, half)
        rows.append([name, f"**{fmt(values(runs, 'best_dev'))}**", fmt(values(runs, "test_after")),
                     fmt(values(runs, "best_step"), 0), fmt(values(runs, last("align")), 3),
                     fmt(values(runs, last("uniform")), 3), fmt(values(runs, first("distance_gap")), 3),
                     fmt(values(runs, last("distance_gap")), 3), failures(runs) or "ok"])
    ctx.figure("nie2023", plot.step_series(panels, ncols=3, suptitle=(
        "Nie et al. 2023 Figs. 1 and 3 at CPU scale, on the training batches\n(alignment and uniformity: Wang & "
        "Isola 2020; band: 95 % interval of the mean over seeds)")))
    setting = f"STS-B test, best-dev checkpoint; {LIGHT_SETTING}; paper: 7-task STS avg."
    for decoupled in ("align_uniform", "dcl"):
        dev_test_claim(ctx, f"infonce_vs_{decoupled}", f"nie2023-fig1-{decoupled}", ctx.runs(decoupled),
                       ctx.runs("infonce"), paper="Nie et al. 2023, Fig. 1 / Table 1", row="",
                       claim=f"InfoNCE beats its decoupled form {label(decoupled)} on STS", setting=setting)
    lo, mid, hi = NIE2023_MPT_MARGINS
    mpt = {m: ctx.runs({"loss": "mpt", "params": {"m": m}}) for m in NIE2023_MPT_MARGINS}
    subs = []
    for other in (lo, hi):
        subs.append(compare(values(mpt[other], "best_dev"), values(mpt[mid], "best_dev"), expect=+1,
                            split="STS-B dev (best)", name=f"m = {mid:g} beats m = {other:g}",
                            other=(values(mpt[other], "test_after"), values(mpt[mid], "test_after")),
                            other_split="STS-B test"))
        d = paired_t(values(mpt[other], "best_dev"), values(mpt[mid], "best_dev"))
        ctx.number(f"claim.mpt_{mid:g}_vs_{other:g}.dev_diff", d.estimate)
        ctx.number(f"claim.mpt_{mid:g}_vs_{other:g}.dev_p", d.p)
    ctx.claim("nie2023-fig3a", paper="Nie et al. 2023, Fig. 3a", subclaims=subs,
              claim=f"MPT works best at an intermediate margin (m = {mid:g} beats {lo:g} and {hi:g})",
              setting=f"best STS-B dev, STS-B test the other split; {LIGHT_SETTING}",
              finding="best dev " + ", ".join(f"m = {m:g}: {mean_sd(values(mpt[m], 'best_dev'))[0]:.2f}"
                                              for m in NIE2023_MPT_MARGINS))
    gap = {name: values(ctx.runs(name), last("distance_gap")) for name in NIE2023_LOSSES}
    d = paired_t(gap["infonce"], gap["align_uniform"])
    ctx.number("claim.gap_align_uniform_vs_infonce.diff", d.estimate)
    ctx.number("claim.gap_align_uniform_vs_infonce.p", d.p)
    ctx.claim("nie2023-fig3b", paper="Nie et al. 2023, Fig. 3b",
              claim="the decoupled form keeps enlarging the distance gap far beyond InfoNCE's",
              test=compare(gap["infonce"], gap["align_uniform"], expect=+1, split="training batches"),
              setting=f"distance gap at the last monitored state; {LIGHT_SETTING}",
              finding=f"distance gap at the last state, alignment + uniformity − InfoNCE: {d.estimate:+.3f}")
    ctx.markdown(
        "Nie et al. 2023 Figs. 1 and 3 at CPU scale: InfoNCE, its decoupled forms, and MPT's margin",
        "InfoNCE, alignment + uniformity (Wang & Isola 2020) and DCL train side by side with MPT at m ∈ "
        f"{{{', '.join(f'{m:g}' for m in NIE2023_MPT_MARGINS)}}} (Nie et al. 2023 Fig. 3c–e). The monitor records "
        "alignment, uniformity and the distance gap (mean over anchors of the mean Euclidean distance to the "
        "negatives minus the distance to the positive) on every monitored training batch. Nie et al. 2023 also plot "
        "InfoNCE's value on each run and the dev-set curves; those are not recorded here.",
        row_table(["loss", "best dev", "test (best dev)", "best step", "alignment →", "uniformity →",
                   "distance gap first", "distance gap →", "status"], rows))


def _score_rows(ctx: Context, losses: list[Any], keys: list[str]) -> tuple[list[list[str]], dict[str, Any]]:
    """One row per loss (best dev, test, best step, never trained) with its numbers exported under ``keys``."""
    rows, scores = [], {}
    for loss, key in zip(losses, keys, strict=True):
        runs = ctx.runs(loss)
        export(ctx, key, runs, RUN_KEYS)
        scores[key] = runs
        test = values(runs, "test_after")
        rows.append([label(loss), fmt(values(runs, "best_dev")), f"**{fmt(test)}**",
                     f"± {ci_half(test):.2f}" if np.isfinite(ci_half(test)) else "n/a",
                     fmt(values(runs, "best_step"), 0), fmt(values(runs, RUN_KEYS["m_o_last"]), 3),
                     ("never trained (best step 0); " if never_trained(runs) else "") + (failures(runs) or "ok")])
    return rows, scores


SCORE_HEADER = ["loss", "best dev", "test (best dev)", "test 95 % interval", "best step", "m_o →", "status"]


def build_rho2023(ctx: Context) -> None:
    """Rho et al. 2023 Sec. 5: emphasizing positives and scaling by the ratio help; curvature is marginal."""
    losses = rho2023_losses()
    keys = [loss["loss"].split(":", 1)[1] for loss in losses]
    rows, runs = _score_rows(ctx, losses, keys)
    setting = ("STS-B test, best-dev checkpoint; Rho et al. 2023's defaults (τ = 0.25, β = 1) on the light sentence "
               "proxy, 100 Adam steps of N = 64 (paper: SimCLR, ResNet-18 on CIFAR-10 / 100 and ImageNet, linear "
               "probe accuracy)")
    paper = "Rho et al. 2023, Sec. 5"
    for key, claim in (("emphasize", "emphasizing positive samples (positive gradient × s = 1.125) improves "
                                     "contrastive training"),
                       ("ratio", "scaling the gradients by the ratio (Algorithm 4, m1 = 0.2) improves contrastive "
                                 "training")):
        dev_test_claim(ctx, key, f"rho2023-{key}", runs["none"], runs[key], paper=paper, row="", claim=claim,
                       setting=setting)
    a, b = values(runs["none"], "test_after"), values(runs["curvature"], "test_after")
    ctx.number("claim.curvature.test_diff", paired_t(a, b).estimate)
    ctx.claim("rho2023-curvature", paper=paper, setting=setting, test=equivalence(a, b, split="STS-B test"),
              claim=f"the other margin effects are marginal: the curvature transform (s = 2.5, c = 0.7) scores "
                    f"within ±{EQUIVALENCE_MARGIN:g} STS point of the untransformed loss",
              finding=f"STS-B test, curvature − none: {paired_t(a, b).estimate:+.2f}")
    ctx.markdown(
        "Rho et al. 2023 at CPU scale: gradient-scaling transforms of InfoNCE on sentences",
        "InfoNCE with β (Rho et al. 2023 Eq. 3; 'none', Algorithm 1) and three of its gradient-scaling transforms, "
        "each the same loss value with a rescaled gradient: emphasize (Eqs. 8–9), ratio (Algorithm 4) and "
        "curvature (Eqs. 10–11), at the paper's defaults for SimCLR on CIFAR-10. Trained on the light sentence "
        "proxy, scored on STS-B: the paper's image setting and linear-probe metric do not run here.",
        row_table(SCORE_HEADER, rows))


def build_farina2023(ctx: Context) -> None:
    """Farina et al. 2023: Barlow Twins and VICReg sentence embeddings are competitive with the contrastive
    baseline on STS."""
    rows, runs = _score_rows(ctx, list(FARINA2023_LOSSES), list(FARINA2023_LOSSES))
    setting = ("STS-B test, best-dev checkpoint; Farina et al. 2023's loss forms at the registry's λ on the light "
               "proxy, 100 Adam steps of N = 64 news sentences (paper: BERT-base, Wikipedia sentences, STS and "
               "transfer tasks, λ scanned per loss)")
    ref = values(runs[TABLE3_REFERENCE], "test_after")
    for name in FARINA2023_LOSSES[1:]:
        b = values(runs[name], "test_after")
        diff = paired_t(ref, b)
        ctx.number(f"claim.{name}.test_diff", diff.estimate)
        ctx.number(f"claim.{name}.test_ci95", list(diff.ci95))
        claim = (f"{label(name)} sentence embeddings are comparable to the contrastive baseline (InfoNCE, within "
                 f"±{EQUIVALENCE_MARGIN:g} STS point)")
        if never_trained(runs[name]):
            claim += "; it never trained here (best dev at step 0 in every seed)"
        ctx.claim(f"farina2023-{name}", paper="Farina et al. 2023", setting=setting, claim=claim,
                  test=equivalence(ref, b, split="STS-B test"),
                  finding=f"STS-B test, {label(name)} − InfoNCE: {paired_t(ref, b).estimate:+.2f}")
    ctx.markdown(
        "Farina et al. 2023 at CPU scale: Barlow Twins and VICReg sentence embeddings against InfoNCE",
        "Barlow Twins on the Pearson correlation of the two views' dimensions (Farina et al. 2023 Eq. 2) and "
        "VICReg in its λ_I, λ_V, λ_C form (Eq. 3), each at the registry's λ, against InfoNCE (SimCSE's loss), "
        "with dropout views as in SimCSE.",
        row_table(SCORE_HEADER, rows))
