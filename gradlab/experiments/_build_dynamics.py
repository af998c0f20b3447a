"""What the monitor and the held-out analysis see over training: Li et al. 2024 Figs. 8 and 9, the
monitored paths on the paper's maps (``trajectory``), and Zhang et al. 2022's m_o and m_r (``zhang2022``).

A claim about a run's course is tested per seed (one number per run: a minimum over states, a
share of anchors, a change from the first to the last state) and then over the seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradlab.experiments._build_components import LIGHT_SETTING
from gradlab.experiments._compute import HELDOUT_LAMBDAS
from gradlab.experiments._spec import loss_label
from gradlab.experiments._studies import RATIO_SWEEP, TRAJECTORY_LOSSES, ZHANG2022_LOSSES, baseline
from gradlab.experiments._tables import (
    RUN_KEYS,
    Context,
    export,
    failures,
    fmt,
    heldout,
    label,
    mean_sd,
    row_table,
    series_result,
    stacked,
    values,
)
from gradlab.experiments.stats import binomial_ci, claim_entry, compare, one_sample_t, paired_t

__all__ = ["build_fig8", "build_fig9", "build_trajectory", "build_zhang2022"]


def _lemma1_share(h: dict[str, np.ndarray], rec: dict, lam: float) -> float:
    """The share of a run's held-out anchors for which r = 1 satisfies Lemma 1 after training: the feasible
    share times the share of feasible anchors whose minimum ratio r_low lies in a bin below 1."""
    edges, counts = h["after/lemma1_edges"], np.asarray(h[f"after/lemma1_hist/{lam:g}"], float)
    feasible = rec["heldout"]["after"][f"lemma1_feasible/{lam:g}"]
    if counts.sum() <= 0:
        return 0.0
    below = counts[(edges[1:] + edges[:-1]) / 2 < 1.0].sum() / counts.sum()
    return float(feasible * below)


def _fig8a(ctx: Context, runs: list[dict]) -> list[str]:
    from gradlab import plot
    from gradlab.io import Result

    held = [heldout(r) for r in runs]
    ok = [(h, r) for h, r in zip(held, runs, strict=True) if h is not None]
    if not ok:
        return []
    edges = ok[0][0]["after/lemma1_edges"]
    panels = {f"λ = {lam:g}": {p: sum(h[f"{p}/lemma1_hist/{lam:g}"] for h, _ in ok) for p in ("before", "after")}
              for lam in HELDOUT_LAMBDAS}
    feas = {lam: {p: values(runs, lambda r, p=p, lam=lam: r["heldout"][p][f"lemma1_feasible/{lam:g}"])
                  for p in ("before", "after")} for lam in HELDOUT_LAMBDAS}
    feasible = {f"λ = {lam:g}": {p: mean_sd(v)[0] for p, v in feas[lam].items()} for lam in HELDOUT_LAMBDAS}
    ctx.figure("fig8a", plot.min_ratio_histograms(edges, panels, feasible=feasible,
                                                  suptitle="Lemma-1 minimum ratio, held-out (baseline training)"))
    hist = np.array([[panels[f"λ = {lam:g}"][p] for p in ("before", "after")] for lam in HELDOUT_LAMBDAS])
    centers = (edges[1:] + edges[:-1]) / 2
    with np.errstate(all="ignore"):
        means = (hist * centers).sum(-1) / hist.sum(-1)
    ctx.result("fig8a", Result(dims=("lam",), coords={"lam": np.array(HELDOUT_LAMBDAS), "bin": centers},
                               mean=means[:, 1], extra={"before": means[:, 0], "histogram": hist},
                               extra_dims={"histogram": ("lam", "phase", "bin")},
                               meta={"statistic": "mean Lemma-1 minimum ratio (feasible anchors), after"}))
    rows, subs = [], []
    for i, lam in enumerate(HELDOUT_LAMBDAS):
        share = np.array([_lemma1_share(h, r, lam) if h is not None else np.nan
                          for h, r in zip(held, runs, strict=True)])
        for j, phase in enumerate(("before", "after")):
            ctx.number(f"a.{lam:g}.r_low_{phase}", means[i, j])
            ctx.number(f"a.{lam:g}.feasible_{phase}.mean", mean_sd(feas[lam][phase])[0])
        ctx.number(f"a.{lam:g}.share_r1.mean", mean_sd(share)[0])
        subs.append(claim_entry(one_sample_t(share, 0.5), expect=+1, split="held-out",
                               name=f"λ = {lam:g}: share of anchors that r = 1 satisfies, minus 0.5"))
        rows.append([f"{lam:g}", *(f"{x:.3f}" if np.isfinite(x) else "n/a (never feasible)" for x in means[i]),
                     *(fmt(v, 3) for v in feas[lam].values()), fmt(share, 3)])
    ctx.claim("li2024-fig8a", paper="Li et al. 2024, Fig. 8a", subclaims=subs,
              claim="across step sizes λ, a ratio r ≥ 1 satisfies Lemma 1 for most anchors",
              setting=f"held-out anchors, hardest negative, one sub-claim per λ; {LIGHT_SETTING}",
              finding="share of held-out anchors that r = 1 satisfies after training, per λ: " + ", ".join(
                  f"{lam:g}: {ctx.numbers[f'a.{lam:g}.share_r1.mean']:.2f}" for lam in HELDOUT_LAMBDAS))
    return row_table(["λ", "mean r_low before", "mean r_low after", "feasible before", "feasible after",
                      "share that r = 1 satisfies"], rows)


def build_fig8(ctx: Context) -> None:
    from gradlab import plot

    rows_a = _fig8a(ctx, ctx.runs(baseline()))
    # (b) dynamic ratios of ArcCon and MET over their own training
    lines_b, named_b, rows_b = {}, {}, []
    for name in ("arccon", "met"):
        r_runs = ctx.runs(name)
        steps, mean, half, table = stacked(r_runs, "ratio/trained")
        lines_b[label(name)] = (steps, mean, half)
        named_b[name] = mean
        finite = mean[np.isfinite(mean)]
        defined = int(np.isfinite(table).sum())
        lo, hi = binomial_ci(defined, table.size) if table.size else (np.nan, np.nan)
        with np.errstate(all="ignore"):
            per_seed_min = np.array([np.nanmin(row) if np.isfinite(row).any() else np.nan for row in table])
        ctx.number(f"b.{name}.mean_ratio", float(finite.mean()) if finite.size else None)
        ctx.number(f"b.{name}.min_ratio", float(finite.min()) if finite.size else None)
        ctx.number(f"b.{name}.records_with_ratio", int(finite.size))
        ctx.number(f"b.{name}.records", int(mean.size))
        ctx.number(f"b.{name}.defined_share", defined / table.size if table.size else None)
        ctx.number(f"b.{name}.defined_ci95", [lo, hi])
        ctx.number(f"b.{name}.min_ratio.seeds", [None if not np.isfinite(x) else float(x) for x in per_seed_min])
        where = (f"R is defined (some anchor passes the GD gate) at {defined} of {table.size} (seed, state) records, "
                 f"{defined / max(table.size, 1):.0%} [95 % CI {lo:.0%}, {hi:.0%}]")
        if np.isfinite(per_seed_min).sum() >= 2:
            ctx.claim(f"li2024-fig8b-{name}", paper="Li et al. 2024, Fig. 8b",
                      claim=f"{label(name)}'s dynamic ratio stays above 1 through training",
                      test=claim_entry(one_sample_t(per_seed_min, 1.0), expect=+1, split="training batches"),
                      setting=f"per seed, the minimum of R over the monitored states where it is defined, minus 1; "
                              f"{LIGHT_SETTING}",
                      finding=f"per-seed minimum R {mean_sd(per_seed_min)[0]:.2f}; {where}")
        else:
            ctx.claim(f"li2024-fig8b-{name}", paper="Li et al. 2024, Fig. 8b", kind="not tested",
                      claim=f"{label(name)}'s dynamic ratio stays above 1 through training", setting=LIGHT_SETTING,
                      reason="R is defined in fewer than 2 seeds", finding=where)
        rows_b.append([label(name), fmt(values(r_runs, "best_dev")),
                       f"{finite.mean():.3f}" if finite.size else "n/a (GD below threshold throughout)",
                       f"{finite[0]:.3f} → {finite[-1]:.3f}" if finite.size else "n/a", fmt(per_seed_min, 3),
                       f"{defined} of {table.size}", failures(r_runs) or "ok"])
    # (c) anchor–positive cosine over steps per r
    lines_c, named_c, rows_c, last_c = {}, {}, [], {}
    for r in RATIO_SWEEP:
        r_runs = ctx.runs(baseline(r=r))
        steps_c, mean, half, table_c = stacked(r_runs, "cos_pos_mean")
        lines_c[f"r = {r:g}"] = (steps_c, mean, half)
        named_c[f"r={r:g}"] = mean
        last_c[r] = table_c[:, -1] if table_c.size else np.full(len(r_runs), np.nan)
        ctx.number(f"c.{r:g}.cos_pos_last", mean_sd(last_c[r])[0])
        rows_c.append([f"{r:g}", fmt(values(r_runs, "best_dev")), fmt(last_c[r], 4), failures(r_runs) or "ok"])
    lo_r, hi_r = min(RATIO_SWEEP), max(RATIO_SWEEP)
    entry = compare(last_c[lo_r], last_c[hi_r], expect=+1, split="training batches")
    d = paired_t(last_c[lo_r], last_c[hi_r])
    ctx.number("c.diff", d.estimate)
    ctx.number("c.p", d.p)
    ctx.claim("li2024-fig8c", paper="Li et al. 2024, Fig. 8c", test=entry,
              claim="a larger static ratio r brings the anchor closer to its positive",
              setting=f"cos(anchor, positive) at the last monitored state, r = {lo_r:g} vs {hi_r:g}; {LIGHT_SETTING}",
              finding=f"cos(anchor, positive) at the last state: {d.estimate:+.4f} from r = {lo_r:g} to {hi_r:g}")
    ctx.figure("fig8bc", plot.step_series({"(b) dynamic ratio R": lines_b, "(c) mean cos(anchor, positive)": lines_c},
                                          suptitle="over training steps (monitored batches; band: 95 % interval "
                                                   "over seeds)",
                                          gaps={"(b) dynamic ratio R": "no anchor's GD above the threshold"}))
    if lines_b[label("arccon")][0].size:
        ctx.result("fig8b", series_result(lines_b[label("arccon")][0], named_b, "monitored dynamic ratio (own loss)"))
    if lines_c and next(iter(lines_c.values()))[0].size:
        ctx.result("fig8c", series_result(next(iter(lines_c.values()))[0], named_c, "monitored mean cos(anchor, pos)"))
    ctx.markdown(
        "Li et al. 2024 Fig. 8 at CPU scale: Lemma-1 ratios, dynamic ratios, the static ratio r",
        "(a) Lemma-1 minimum ratio r_low of the hardest negative per held-out anchor (feasible anchors), before and "
        "after baseline training; (b) the monitor's mean dynamic ratio Σ W R / Σ W of ArcCon and MET while each "
        "trains (a record has no R when no anchor's GD passes the monitor's threshold); (c) the monitor's mean "
        "anchor–positive cosine while the baseline trains with r ∈ {0.5, 1, 1.5, 2}.",
        ["(a)", "", *rows_a,
         "", "(b)", "", *row_table(["loss", "best dev", "mean R over records", "R first → last",
                                    "per-seed minimum R", "(seed, state) records with R", "status"], rows_b),
         "", "(c)", "", *row_table(["r", "best dev", "cos(anchor, positive) at the last record", "status"], rows_c)])


def build_fig9(ctx: Context) -> None:
    from gradlab import plot
    from gradlab.simulate import Protocol

    runs = ctx.runs(baseline())
    panels, named, rows, tables = {}, {}, [], {}
    names = {"mu_pos": "μ_pos", "mu_neg": "μ_neg", "sigma_pos": "σ_pos", "sigma_neg": "σ_neg"}
    steps = np.zeros(0)
    for key, lab in names.items():
        steps, mean, half, tables[key] = stacked(runs, key)
        panels[lab] = {lab: (steps, mean, half)}
        named[key] = mean
    sim = Protocol()  # the σ's Li et al. 2024 Sec. 3.1 assumes, which Fig. 9 checks
    refs = {"σ_pos": [(sim.sigma_pos, f"simulation's σ_pos = {sim.sigma_pos:.2f}")],
            "σ_neg": [(sim.sigma_neg, f"simulation's σ_neg = {sim.sigma_neg:.2f}")]}
    ctx.figure("fig9", plot.step_series(panels, ncols=4, references=refs, suptitle=(
        "Eq. 5 baseline: monitored angle statistics (radians; band: 95 % interval over seeds)")))
    if steps.size:
        ctx.result("fig9", series_result(steps, named, "monitored angle statistics over training (mean over seeds)"))
        for i in sorted({0, steps.size // 2, steps.size - 1}):
            rows.append([f"{steps[i]:g}", *(f"{named[k][i]:.3f}" for k in names)])
        for k in names:
            ctx.number(f"{k}.first", named[k][0])
            ctx.number(f"{k}.last", named[k][-1])
            ctx.number(f"{k}.min", np.nanmin(named[k]))
            ctx.number(f"{k}.max", np.nanmax(named[k]))
        text = []
        for k, ref in (("sigma_pos", sim.sigma_pos), ("sigma_neg", sim.sigma_neg)):
            with np.errstate(all="ignore"):
                run_mean = np.nanmean(tables[k], axis=1)
            r = one_sample_t(run_mean, 0.0)
            ctx.number(f"{k}.run_mean", r.estimate)
            ctx.number(f"{k}.run_mean_ci95", list(r.ci95))
            text.append(f"run-mean {names[k]} {r.estimate:.3f} [95 % CI {r.ci95[0]:.3f}, {r.ci95[1]:.3f}] "
                        f"(simulation: {ref:.2f})")
        ctx.claim("li2024-fig9", paper="Li et al. 2024, Fig. 9 / App. A.1", kind="descriptive",
                  claim="during training σ_pos ≈ 0.05 and σ_neg ≈ 0.10 (the simulation's values)",
                  setting=f"monitored training batches; {LIGHT_SETTING}", finding="; ".join(text),
                  reason="the paper's ≈ states no tolerance, so no test decides it; the intervals are shown")
    gate = _gate_table(ctx, runs, steps, named.get("mu_neg"))
    ctx.markdown(
        "Li et al. 2024 Fig. 9 at CPU scale: μ_pos, μ_neg, σ_pos, σ_neg over baseline training",
        f"The ParadigmMonitor's estimates on the training batches (two dropout views), at states 0 (before the first "
        f"update), 1 and every {ctx.scale.run.monitor_every} steps, mean over seeds. {failures(runs)}",
        [*row_table(["state", *names.values()], rows), "",
         "The gate of the trained baseline (m = 0.3): its mean GD at each state, the gradient norm of the update "
         "that used those views, and μ_neg (seed means). Adam keeps moving the parameters after the gradient is "
         "exactly zero (its first moment decays by β1 = 0.9 per step, and a rare reopened gate gives a full-size "
         "normalized step).", "", *gate])


def _grad_norms(run: dict) -> dict[int, float]:
    """Step -> gradient norm of that update, from the run's training log."""
    import json
    from pathlib import Path

    if run.get("status") != "done":
        return {}
    out = {}
    with open(Path(run["dir"]) / "train_log.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("event") == "step":
                out[int(rec["step"])] = float(rec["grad_norm"])
    return out


def _gate_table(ctx: Context, runs: list[dict], steps: np.ndarray, mu_neg: np.ndarray | None) -> list[str]:
    """The baseline's gate over training (numbers ``gate.<state>.*``) and its rows."""
    _, gd, _, _ = stacked(runs, "gd_mean/trained")
    norms = [_grad_norms(r) for r in runs]
    zero = [sum(1 for v in g.values() if v == 0.0) for g in norms if g]
    ctx.number("gate.zero_grad_steps.mean", float(np.mean(zero)) if zero else None)
    ctx.number("gate.zero_grad_steps.seeds", zero)
    ctx.number("gate.steps", ctx.scale.run.steps)
    rows = []
    for i, state in enumerate(steps.astype(int)):
        g = [n.get(state + 1) for n in norms if n.get(state + 1) is not None]
        gn = float(np.mean(g)) if g else None
        ctx.number(f"gate.{state}.gd", gd[i])
        ctx.number(f"gate.{state}.grad_norm", gn)
        if mu_neg is not None:
            ctx.number(f"gate.{state}.mu_neg", mu_neg[i])
        if state in (0, 1, 5, 10, 15, 20, 25, 50) or i == steps.size - 1:
            rows.append([f"{state}", f"{gd[i]:.3f}", "n/a (last state)" if gn is None else f"{gn:.4f}",
                         "n/a" if mu_neg is None else f"{mu_neg[i]:.3f}"])
    return row_table(["state", "mean GD (trained)", "grad norm of the next update", "μ_neg"], rows)


def _trajectory_name(loss: Any) -> str:
    """A file-name stem for a trajectory run: the name, ``baseline``, or the loss's own label."""
    if isinstance(loss, str):
        return loss
    if loss.get("loss") == "baseline" and loss.get("params") == baseline()["params"]:
        return "baseline"
    text = loss_label(loss)
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip("_")


def build_trajectory(ctx: Context) -> None:
    from gradlab import plot
    from gradlab.design import resolve_loss
    from gradlab.experiments._trajectory import run_path, trajectory

    grid, batches = (30, 100) if ctx.scale.quick else (60, 300)
    rows = []
    chosen = ctx.losses or [baseline() if n == "baseline" else n for n in TRAJECTORY_LOSSES]
    for loss in chosen:
        name = _trajectory_name(loss)
        (run,) = ctx.runs(loss, seeds=[0])
        t = label(name) if isinstance(loss, str) or name == "baseline" else label(loss)
        if run.get("status") != "done":
            rows.append([t, "", "", "", f"failed: {run.get('error')}"])
            continue
        path = run_path(run["dir"])
        res = trajectory(resolve_loss(run["spec"]["loss"]), path, batch_size=ctx.scale.run.batch_size, grid=grid,
                         batches=batches)
        meta = res["path"].meta
        ctx.figure(f"trajectory_{name}", plot.trajectory_on_maps(
            [res["gd"], res["ratio"]], path["mu_pos"], path["mu_neg"], titles=["simulated GD", "simulated ratio R"],
            quantities=["gd", "ratio"], ranges=[(0.0, 1.0), (0.0, 3.0)],
            suptitle=f"{t}: training path (seed 0) on its own simulated maps\n(σ_pos={meta['sigma_pos']:.3f}, "
                     f"σ_neg={meta['sigma_neg']:.3f}, N={ctx.scale.run.batch_size})"))
        for key in ("gd", "ratio", "path"):
            ctx.result(f"trajectory_{name}_{key}", res[key])
        gd_path = res["path"].mean
        for key, val in (("mu_pos_first", path["mu_pos"][0]), ("mu_neg_first", path["mu_neg"][0]),
                         ("mu_pos_last", path["mu_pos"][-1]), ("mu_neg_last", path["mu_neg"][-1]),
                         ("sigma_pos", meta["sigma_pos"]), ("sigma_neg", meta["sigma_neg"]),
                         ("gd_first", gd_path[0]), ("gd_last", gd_path[-1]), ("first_step", path["step"][0])):
            ctx.number(f"{name}.{key}", val)
        rows.append([t, f"({path['mu_pos'][0]:.3f}, {path['mu_neg'][0]:.3f}) → ({path['mu_pos'][-1]:.3f}, "
                        f"{path['mu_neg'][-1]:.3f})", f"{meta['sigma_pos']:.3f}, {meta['sigma_neg']:.3f}",
                     f"{gd_path[0]:.3f} → {gd_path[-1]:.3f}", "ok"])
    ctx.markdown(
        "Real training on the paper's maps: monitored (μ_pos, μ_neg) paths",
        f"Each run's monitored path (seed 0) drawn on the GD map and ratio map of its own loss, simulated "
        f"(Li et al. 2024 Sec. 3.1 protocol, {grid}×{grid} grid, {batches} batches per cell) with the run's batch "
        "size and the mean σ_pos, σ_neg the monitor measured. 'simulated GD' is the map's value at the path's first "
        "and last cells.",
        row_table(["loss", "path (μ_pos, μ_neg) first → last", "σ_pos, σ_neg", "simulated GD first → last",
                   "status"], rows))


ZHANG2022_SETTING = ("m_o, m_r of the two views' l2-normalized embeddings on the monitored training batches; light "
                     "proxy, 100 Adam steps of N = 64 news sentences (paper: SimSiam and SimCLR, ResNet-18 on "
                     "CIFAR-10 / 100 images)")


def build_zhang2022(ctx: Context) -> None:
    """Zhang et al. 2022: collapse drives the center ratio m_o → 1 and the residual ratio m_r → 0."""
    from gradlab import plot

    reference, *collapsing = ZHANG2022_LOSSES
    ref_runs = ctx.runs(reference)
    panels: dict[str, dict] = {"m_o (center)": {}, "m_r (residual)": {}}
    rows = []
    for name in ZHANG2022_LOSSES:
        runs = ctx.runs(name)
        export(ctx, name, runs, RUN_KEYS)
        for panel, key in zip(panels.values(), ("m_o", "m_r"), strict=True):
            steps, mean, half, _ = stacked(runs, key)
            panel[label(name)] = (steps, mean, half)
        rows.append([label(name), fmt(values(runs, "best_dev")), fmt(values(runs, "best_step"), 0),
                     fmt(values(runs, RUN_KEYS["m_o_first"]), 3), fmt(values(runs, RUN_KEYS["m_o_last"]), 3),
                     fmt(values(runs, RUN_KEYS["m_r_first"]), 3), fmt(values(runs, RUN_KEYS["m_r_last"]), 3),
                     failures(runs) or "ok"])
    for name in collapsing:
        runs = ctx.runs(name)
        mo0, mo1 = values(runs, RUN_KEYS["m_o_first"]), values(runs, RUN_KEYS["m_o_last"])
        mr0, mr1 = values(runs, RUN_KEYS["m_r_first"]), values(runs, RUN_KEYS["m_r_last"])
        subs = [claim_entry(paired_t(mo0, mo1), expect=+1, split="training batches",
                           name="m_o rises from the first to the last state"),
                claim_entry(paired_t(mr0, mr1), expect=-1, split="training batches",
                           name="m_r falls from the first to the last state"),
                claim_entry(paired_t(values(ref_runs, RUN_KEYS["m_o_last"]), mo1), expect=+1, split="training batches",
                           name=f"m_o at the last state above {label(reference)}'s")]
        ctx.claim(f"zhang2022-{name}", paper="Zhang et al. 2022, Sec. 3", subclaims=subs,
                  claim=f"collapse shows as m_o → 1 and m_r → 0: {label(name)} at its default ν (Li et al. 2024's "
                        "form; it never improves on its starting checkpoint here)", setting=ZHANG2022_SETTING,
                  finding=f"m_o {mean_sd(mo0)[0]:.3f} → {mean_sd(mo1)[0]:.3f}, m_r {mean_sd(mr0)[0]:.3f} → "
                          f"{mean_sd(mr1)[0]:.3f}; {label(reference)}'s m_o at the end "
                          f"{mean_sd(values(ref_runs, RUN_KEYS['m_o_last']))[0]:.3f}")
    ctx.figure("zhang2022", plot.step_series(panels, ncols=2, suptitle=(
        "Zhang et al. 2022's center and residual ratios over training (band: 95 % interval over seeds)")))
    ctx.markdown(
        "Zhang et al. 2022 at CPU scale: m_o and m_r over training, collapsing losses against InfoNCE",
        "The center ratio m_o = ‖o‖ and residual ratio m_r (mean ‖z − o‖) of the l2-normalized embeddings of "
        "each monitored training batch (mean of the two views). Collapse, every embedding equal to the center, "
        "drives m_o → 1 and m_r → 0 (Zhang et al. 2022). Barlow Twins and VICReg are Li et al. 2024's forms at "
        "their registry ν, the runs of the table3 study.",
        row_table(["loss", "best dev", "best step", "m_o first", "m_o last", "m_r first", "m_r last", "status"],
                  rows))

