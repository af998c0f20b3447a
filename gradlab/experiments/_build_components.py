"""Li et al. 2024 Sec. 3.2's component studies at CPU scale: Fig. 6 (m, τ, r swept), Fig. 5 (GD against
GD ≡ 1) and Fig. 7 (the hardest negative's share of W before and after training).

Every comparison is paired over the seeds (the arms share data order, initialization and dropout
masks); the figures draw the 95 % t intervals of the arm means that the claims compare.
"""

from __future__ import annotations

import numpy as np

from gradlab.experiments._compute import HELDOUT_TAUS
from gradlab.experiments._studies import GD_ONE_M, baseline
from gradlab.experiments._tables import (
    RUN_KEYS,
    Context,
    ci_half,
    export,
    failures,
    fmt,
    heldout,
    last,
    mean_sd,
    row_table,
    table_result,
    values,
)
from gradlab.experiments.stats import claim_entry, compare, one_sample_t, paired_t

__all__ = ["build_fig6", "build_fig5", "build_fig7", "LIGHT_SETTING"]

SYMBOL = {"m": "m", "tau": "τ", "r": "r"}
PANEL = {"m": "GD: margin m", "tau": "W: temperature τ", "r": "R: ratio r"}
#: How far the CPU studies are from Li et al. 2024's setting (each claim row says it).
LIGHT_SETTING = ("light proxy: a trainable projection over frozen MiniLM token embeddings, 100 Adam steps of "
                 "N = 64 news sentences (paper: BERT-base, an epoch of 10^6 Wikipedia sentences)")


def build_fig6(ctx: Context) -> None:
    from gradlab import plot

    panels, failed, labels, per_seed, status, ids, rows = {}, {}, [], [], [], [], []
    cols: dict[str, list] = {"value": [], "test_after": [], "gd_mean": []}
    before = None
    for comp, vals in ctx.scale.sweeps().items():
        means, halves, bad = [], [], []
        for v in vals:
            runs = ctx.runs(baseline(**{comp: v}))
            dev = values(runs, "best_dev")
            before = before if before is not None else mean_sd(values(runs, "dev_before"))[0]
            means.append(mean_sd(dev)[0])
            halves.append(ci_half(dev))
            if failures(runs):
                bad.append(v)
            labels.append(f"{comp}={v:g}")
            per_seed.append(dev)
            cols["value"].append(v)
            cols["test_after"].append(mean_sd(values(runs, "test_after"))[0])
            cols["gd_mean"].append(mean_sd(values(runs, RUN_KEYS["gd_run"]))[0])
            status.append(failures(runs) or "done")
            ids.append([r["id"] for r in runs])
            rows.append([SYMBOL[comp], f"{v:g}" + (" (baseline)" if v == baseline()["params"][comp] else ""),
                         f"**{fmt(dev)}**", fmt(values(runs, "best_step"), 0), fmt(values(runs, "test_after")),
                         fmt(values(runs, RUN_KEYS["gd_run"]), 3), fmt(values(runs, last("mu_pos"))),
                         fmt(values(runs, last("mu_neg"))), failures(runs) or "ok"])
        heading = PANEL[comp]
        panels[heading] = (vals, np.array(means), np.array(halves) if ctx.scale.seeds > 1 else None)
        failed[heading] = bad
    for comp, vals in ctx.scale.sweeps().items():
        for v in vals:
            export(ctx, f"{comp}={v:g}", ctx.runs(baseline(**{comp: v})), RUN_KEYS)
    ctx.number("dev_before", before)
    notes = _fig6_claims(ctx)
    ctx.figure("fig6", plot.component_sweeps(panels, reference=before, failed=failed, notes=notes,
                                             suptitle="Eq. 5 baseline, one component varied (STS-B dev, best step; "
                                                      "band: 95 % interval of the mean over seeds)"))
    ctx.result("fig6", table_result(labels, np.array(per_seed), "best STS-B dev Spearman × 100", cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Fig. 6 at CPU scale: the Eq. 5 baseline, one component varied",
        "GD = 1[c_p − max_k c_k < m], W = softmax(c/τ), R = r (baseline m = 0.3, τ = 0.05, r = 1); each row varies "
        "one of them. Score: best STS-B dev Spearman × 100 over the dev evaluations (the checkpoint the paper keeps); "
        f"before training: {before:.2f}. 'GD mean' is the monitor's mean GD of the trained loss over the run.",
        row_table(["component", "value", "best dev", "best step", "test (best dev)", "GD mean", "μ_pos →",
                   "μ_neg →", "status"], rows))


def _fig6_claims(ctx: Context) -> dict[str, str]:
    """Li et al. 2024 Fig. 6's three directions: a paired t test between the ends of each sweep on best dev
    (Fig. 6's metric), STS-B test the other split. Returns each panel's note: the claim's paired
    difference with its 95 % interval."""
    notes = {}
    sweeps = ctx.scale.sweeps()
    specs = {"m": (0.3, max(sweeps["m"]), -1, "best dev falls as the margin m grows"),
             "tau": (0.05, 0.3, -1, "best dev drops sharply once τ ≥ 0.3"),
             "r": (min(sweeps["r"]), max(sweeps["r"]), +1, "best dev rises with the ratio r")}
    for comp, (lo, hi, expect, claim) in specs.items():
        if lo not in sweeps[comp] or hi not in sweeps[comp]:
            continue
        a, b = ctx.runs(baseline(**{comp: lo})), ctx.runs(baseline(**{comp: hi}))
        entry = compare(values(a, "best_dev"), values(b, "best_dev"), expect=expect, split="STS-B dev (best)",
                        other=(values(a, "test_after"), values(b, "test_after")), other_split="STS-B test")
        d_dev = paired_t(values(a, "best_dev"), values(b, "best_dev"))
        d_test = paired_t(values(a, "test_after"), values(b, "test_after"))
        for key, val in (("dev_diff", d_dev.estimate), ("dev_p", d_dev.p), ("test_diff", d_test.estimate),
                         ("test_p", d_test.p)):
            ctx.number(f"claim.{comp}.{key}", val)
        symbol = SYMBOL[comp]
        notes[PANEL[comp]] = (f"best dev, {symbol} = {hi:g} − {lo:g}: {d_dev.estimate:+.2f}\n"
                              f"[95 % CI {d_dev.ci95[0]:+.2f}, {d_dev.ci95[1]:+.2f}], paired over seeds")
        ctx.claim(f"li2024-fig6-{comp}", paper="Li et al. 2024, Fig. 6", claim=claim, test=entry,
                  setting=f"{symbol} = {lo:g} vs {hi:g}; {LIGHT_SETTING}",
                  finding=f"best dev {d_dev.estimate:+.2f} from {symbol} = {lo:g} to {hi:g}; STS-B test "
                          f"{d_test.estimate:+.2f} (p = {d_test.p:.2g})")
    return notes


def build_fig5(ctx: Context) -> None:
    from gradlab import plot

    panels, rows, labels, per_seed, status, ids = {}, [], [], [], [], []
    cols: dict[str, list] = {"heldout_cos_pos": [], "heldout_cos_neg": []}
    edges = None

    def after(k):
        return lambda r: r["heldout"]["after"][k]

    def gap(r):
        return r["heldout"]["after"]["mu_neg"] - r["heldout"]["after"]["mu_pos"]

    gaps = {}
    for key, name, loss in (("baseline", "baseline (GD = indicator, m = 0.3)", baseline()),
                            ("gd_one", "GD ≡ 1", baseline(m=GD_ONE_M))):
        runs = ctx.runs(loss)
        held = [h for h in (heldout(r) for r in runs) if h is not None]
        if held:
            edges = held[0]["after/cos_edges"]
            panels[name] = {k.replace("after/cos_", "").replace("_hist", ""): sum(h[k] for h in held)
                            for k in ("after/cos_pos_hist", "after/cos_neg_hist")}
            panels[name].update({f"{k}_before": sum(h[f"before/cos_{k}_hist"] for h in held) for k in ("pos", "neg")})
        dev, cpos, cneg = values(runs, "best_dev"), values(runs, after("cos_pos_mean")), values(runs, after("cos_neg_mean"))
        gaps[key] = values(runs, gap)
        labels.append(name)
        per_seed.append(dev)
        cols["heldout_cos_pos"].append(mean_sd(cpos)[0])
        cols["heldout_cos_neg"].append(mean_sd(cneg)[0])
        status.append(failures(runs) or "done")
        ids.append([r["id"] for r in runs])
        rows.append([name, f"**{fmt(dev)}**", fmt(values(runs, "test_after")), fmt(cpos, 3), fmt(cneg, 3),
                     fmt(values(runs, after("mu_pos")), 3), fmt(values(runs, after("mu_neg")), 3), fmt(gaps[key], 3),
                     failures(runs) or "ok"])
        export(ctx, key, runs, {**RUN_KEYS, **{f"heldout_{k}": after(k) for k in
                                              ("cos_pos_mean", "cos_neg_mean", "mu_pos", "mu_neg")},
                                "heldout_gap": gap})
    entry = compare(gaps["gd_one"], gaps["baseline"], expect=-1, split="held-out news sentences")
    ctx.number("claim.gap.diff", -entry["estimate"] if entry["estimate"] is not None else None)
    ctx.number("claim.gap.p", entry["p"])
    ctx.claim("li2024-fig5", paper="Li et al. 2024, Fig. 5", test=entry, setting=LIGHT_SETTING,
              claim="with GD the anchor–positive angles stay closer to the anchor–negative ones than with GD ≡ 1",
              finding=f"held-out μ_neg − μ_pos after training: {mean_sd(gaps['baseline'])[0]:.3f} rad with GD, "
                      f"{mean_sd(gaps['gd_one'])[0]:.3f} with GD ≡ 1")
    if panels:
        d = paired_t(gaps["gd_one"], gaps["baseline"])
        ctx.figure("fig5", plot.cosine_histograms(edges, panels, suptitle=(
            "held-out cosines after training (dotted: before); μ_neg − μ_pos, GD minus GD ≡ 1: "
            f"{d.estimate:+.3f} rad [95 % CI {d.ci95[0]:+.3f}, {d.ci95[1]:+.3f}], paired over seeds")))
    ctx.result("fig5", table_result(labels, np.array(per_seed), "best STS-B dev Spearman × 100", cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Fig. 5 at CPU scale: does GD matter?",
        "The Eq. 5 baseline against the same loss with its gate always open (m = 4 > 2 ≥ c_p − max c_k, so GD ≡ 1). "
        "Cosines are measured on held-out news sentences (10% of the corpus, never trained on), two dropout views "
        "each, in batches of N.",
        row_table(["loss", "best dev", "test (best dev)", "held-out cos(anchor, positive)",
                   "held-out cos(anchor, negative)", "held-out μ_pos", "held-out μ_neg", "held-out μ_neg − μ_pos",
                   "status"], rows))


def build_fig7(ctx: Context) -> None:
    from gradlab import plot
    from gradlab.io import Result

    runs = ctx.runs(baseline())
    series, rows, table = {}, [], {}
    for phase in ("before", "after"):
        per = np.array([values(runs, lambda r, k=k, p=phase: r["heldout"][p][f"hardest_share/{k:g}"])
                        for k in HELDOUT_TAUS])  # (tau, seed)
        table[phase] = per
        series[f"{phase} training"] = (np.array([mean_sd(row)[0] for row in per]),
                                       ci_half(per, axis=1) if ctx.scale.seeds > 1 else None)
    for i, k in enumerate(HELDOUT_TAUS):
        rows.append([f"{k:g}", fmt(table["before"][i], 3), fmt(table["after"][i], 3)])
        for phase in ("before", "after"):
            m, sd = mean_sd(table[phase][i])
            ctx.number(f"share.{k:g}.{phase}.mean", m)
            ctx.number(f"share.{k:g}.{phase}.sd", sd)
    if 0.05 in HELDOUT_TAUS:
        i05 = list(HELDOUT_TAUS).index(0.05)
        before, after = table["before"][i05], table["after"][i05]
        grows = claim_entry(paired_t(before, after), expect=+1, split="held-out", name="grows with training "
                           "(after − before, paired)")
        dominates = claim_entry(one_sample_t(after, 0.5), expect=+1, split="held-out",
                               name="dominates after training (share − 0.5, one-sample)")
        ctx.claim("li2024-fig7", paper="Li et al. 2024, Fig. 7", subclaims=[grows, dominates],
                  claim="after training, τ = 0.05 already lets the hardest negative dominate W",
                  setting=f"W = softmax(c/τ) on held-out batches of N = 64; {LIGHT_SETTING}",
                  finding=f"held-out share at τ = 0.05: {mean_sd(before)[0]:.3f} before → {mean_sd(after)[0]:.3f} "
                          "after; dominating: above 0.5")
    note = ""
    if 0.05 in HELDOUT_TAUS:
        i05 = list(HELDOUT_TAUS).index(0.05)
        g = paired_t(table["before"][i05], table["after"][i05])
        note = f"\nτ = 0.05: after − before {g.estimate:+.3f} [95 % CI {g.ci95[0]:+.3f}, {g.ci95[1]:+.3f}], paired"
    ctx.figure("fig7", plot.weight_share_before_after(np.array(HELDOUT_TAUS), series, title=(
        "hardest negative's share of W (held-out, baseline;\nband: 95 % interval over seeds)" + note)))
    ctx.result("fig7", Result(dims=("tau",), coords={"tau": np.array(HELDOUT_TAUS)}, mean=series["after training"][0],
                              extra={"before": series["before training"][0], "after_per_seed": table["after"],
                                     "before_per_seed": table["before"]},
                              meta={"statistic": "hardest negative's share of softmax(c/τ), held-out, after training",
                                    "failures": failures(runs)}))
    ctx.markdown(
        "Li et al. 2024 Fig. 7 at CPU scale: the hardest negative's share of W per τ",
        "Share of the hardest negative in W = softmax_j(c_ij'/τ) per anchor, averaged over held-out batches of N, "
        f"with the initial encoder and with the best-dev checkpoint of the Eq. 5 baseline. {failures(runs)}",
        row_table(["τ", "share before training", "share after training"], rows))
