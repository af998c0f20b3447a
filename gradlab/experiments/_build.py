"""Turn a study's run records into its outputs: figure(s), Result bundle(s), ``results.md``.

Every table has one row per configuration; a configuration with a failed seed says so in
its row (``failed: <error>``), never a silently missing row. Spreads are sample standard
deviations over the seeds that finished.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradlab.experiments._spec import loss_label
from gradlab.experiments._studies import (
    GD_ONE_M,
    RATIO_SWEEP,
    TABLE3_PAIRS,
    TABLE3_REFERENCE,
    TRAJECTORY_LOSSES,
    Scale,
    baseline,
)
from gradlab.experiments._worker import HELDOUT_LAMBDAS, HELDOUT_TAUS

__all__ = ["BUILDERS", "Context"]

TITLES = {"infonce": "InfoNCE", "barlow_twins": "Barlow Twins", "mb": "mB", "vicreg": "VICReg", "mv": "mV",
          "align_mhe": "alignment + MHE", "mmhe": "mMHE", "align_mhs": "alignment + MHS", "mmhs": "mMHS",
          "arccon": "ArcCon", "met": "MET", "baseline": "baseline (Eq. 5)"}
SYMBOL = {"m": "m", "tau": "τ", "r": "r"}


class Context:
    """What a builder needs: the records, the scale, where to write, and provenance."""

    def __init__(self, study: str, records: Mapping[str, dict], scale: Scale, out: Path, *, command: str,
                 wall_s: float, executed: int, fmt: str = "png", losses: Sequence[Any] | None = None):
        self.study, self.records, self.scale, self.out = study, records, scale, Path(out) / study
        self.command, self.wall_s, self.executed, self.fmt = command, wall_s, executed, fmt
        self.losses = losses  # trajectory: the chosen losses (None: TRAJECTORY_LOSSES)
        self.files: list[Path] = []
        self.out.mkdir(parents=True, exist_ok=True)

    # --- lookups -------------------------------------------------------------------------
    def runs(self, loss: Any, seeds: Sequence[int] | None = None) -> list[dict]:
        seeds = range(self.scale.seeds) if seeds is None else seeds
        return [self.records[self.scale.spec(loss, s).id] for s in seeds]

    # --- writers -------------------------------------------------------------------------
    def figure(self, stem: str, fig) -> None:
        from gradlab.plot import save_figure

        self.files.append(save_figure(fig, self.out / f"{stem}.{self.fmt}", self.fmt))

    def result(self, stem: str, result) -> None:
        self.files.extend(result.save(self.out / stem, provenance=self.provenance()))

    def provenance(self) -> dict[str, Any]:
        from gradlab.io import runtime_meta

        return {"study": self.study, "command_line": self.command, "scale": self.scale.to_dict(),
                "seeds": list(range(self.scale.seeds)), "wall_time_s": round(self.wall_s, 2), **runtime_meta()}

    def markdown(self, title: str, intro: str, table: list[str], notes: Sequence[str] = ()) -> None:
        from gradlab.io import atomic_write_text

        runs = [r for r in self.records.values() if r.get("spec") is not None]
        train_s = sum(float(r.get("seconds") or 0.0) for r in runs)
        sc = self.scale
        lines = [
            f"# {title}", "", intro, "",
            f"Scale: encoder {sc.encoder}, {sc.steps} Adam steps, batch {sc.batch_size}, "
            f"{sc.max_sentences} training sentences, STS-B dev every {sc.eval_every} steps on "
            f"{'all 1,500' if sc.dev_pairs is None else sc.dev_pairs} dev pairs, monitor every {sc.monitor_every} "
            f"steps{', QUICK smoke mode' if sc.quick else ''}. Seeds {list(range(sc.seeds))}; mean ± sample sd.",
            "", *table, "", *notes, "" if notes else "",
            f"Command: `{self.command}`", "",
            f"Runs: {len(runs)} ({self.executed} executed by this invocation, the rest reused from "
            f"`runs/`); their training time {train_s / 60:.1f} min (sum over runs); this invocation's wall time "
            f"{self.wall_s / 60:.1f} min.", "",
        ]
        self.files.append(atomic_write_text(self.out / "results.md", "\n".join(lines)))


# --- small helpers ---------------------------------------------------------------------------
def _vals(runs: Sequence[dict], key: str | Callable[[dict], Any]) -> np.ndarray:
    get = key if callable(key) else (lambda r: r.get(key))
    out = []
    for r in runs:
        v = get(r) if r.get("status") == "done" else None
        out.append(float(v) if isinstance(v, (int, float)) and math.isfinite(v) else np.nan)
    return np.array(out, float)


def _mean_sd(v: np.ndarray) -> tuple[float, float | None]:
    v = np.asarray(v, float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return float("nan"), None
    return float(ok.mean()), (float(ok.std(ddof=1)) if ok.size > 1 else None)


def _fmt(v: np.ndarray, digits: int = 2) -> str:
    m, sd = _mean_sd(v)
    if not math.isfinite(m):
        return "n/a"
    return f"{m:.{digits}f}" if sd is None else f"{m:.{digits}f} ± {sd:.{digits}f}"


def _failures(runs: Sequence[dict]) -> str:
    bad = [r for r in runs if r.get("status") != "done"]
    if not bad:
        return ""
    return "; ".join(f"seed {r['spec']['seed']} failed: {r.get('error', '?')}" for r in bad)


def _last(key: str):
    return lambda r: (r.get("monitor") or {}).get("last", {}).get(key)


def _row_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _table_result(labels: Sequence[str], per_seed: np.ndarray, statistic: str, columns: Mapping[str, np.ndarray],
                  status: Sequence[str], run_ids: Sequence[Sequence[str]]):
    from gradlab.io import Result

    per_seed = np.asarray(per_seed, float).reshape(len(labels), -1)
    mean = np.array([_mean_sd(row)[0] for row in per_seed])
    sd = np.array([np.nan if _mean_sd(row)[1] is None else _mean_sd(row)[1] for row in per_seed])
    n = np.isfinite(per_seed).sum(1)
    return Result(dims=("row",), coords={"row": np.arange(len(labels))}, mean=mean,
                  stderr=np.where(n > 1, sd / np.sqrt(np.maximum(n, 1)), np.nan),
                  extra={"label": np.array(labels, dtype=str), "per_seed": per_seed, "sd": sd,
                         "status": np.array(status, dtype=str), "run_ids": np.array(run_ids, dtype=str),
                         **{k: np.asarray(v, float) for k, v in columns.items()}},
                  meta={"statistic": statistic})


def _heldout(run: dict) -> dict[str, np.ndarray] | None:
    if run.get("status") != "done":
        return None
    with np.load(Path(run["dir"]) / "heldout.npz", allow_pickle=False) as f:
        return {k: np.asarray(f[k]) for k in f.files}


def _series(run: dict, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, values) of a monitor statistic (``"mu_pos"`` or ``"ratio/arccon"``) over a run."""
    if run.get("status") != "done":
        return None
    from gradlab.monitor import read_log

    steps, vals = [], []
    for r in read_log(Path(run["dir"]) / "paradigm_monitor.jsonl"):
        if not r.get("valid"):
            continue
        v: Any = r
        for part in key.split("/"):
            v = v.get(part) if isinstance(v, dict) else None
        steps.append(r["step"])
        vals.append(float(v) if isinstance(v, (int, float)) else np.nan)
    return np.array(steps, float), np.array(vals, float)


def _stacked(runs: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Steps, mean and sd over seeds of a monitor series, and the (seed, step) values (NaN: failed)."""
    got = [_series(r, key) for r in runs]
    steps = next((g[0] for g in got if g is not None), np.zeros(0))
    table = np.full((len(runs), steps.size), np.nan)
    for i, g in enumerate(got):
        if g is not None and g[0].size == steps.size:
            table[i] = g[1]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(table, 0) if table.size else np.zeros(0)
            sd = np.nanstd(table, 0, ddof=1) if len(runs) > 1 and table.size else None
    return steps, mean, sd, table


def _series_result(steps, named: Mapping[str, np.ndarray], statistic: str):
    from gradlab.io import Result

    first, *_ = named.values()
    return Result(dims=("step",), coords={"step": np.asarray(steps, float)}, mean=np.asarray(first, float),
                  extra={k: np.asarray(v, float) for k, v in named.items()}, meta={"statistic": statistic})


def _title(loss: Any) -> str:
    if isinstance(loss, str):
        return TITLES.get(loss, loss)
    return loss_label(loss)


# --- the studies -----------------------------------------------------------------------------
def build_fig6(ctx: Context) -> None:
    from gradlab import plot

    panels, failed, labels, per_seed, cols, status, ids = {}, {}, [], [], {"value": [], "test_after": [],
                                                                          "gd_mean": []}, [], []
    rows = []
    before = None
    for comp, values in ctx.scale.sweeps().items():
        means, sds, bad = [], [], []
        for v in values:
            runs = ctx.runs(baseline(**{comp: v}))
            dev = _vals(runs, "best_dev")
            before = before if before is not None else _mean_sd(_vals(runs, "dev_before"))[0]
            m, sd = _mean_sd(dev)
            means.append(m)
            sds.append(np.nan if sd is None else sd)
            if _failures(runs):
                bad.append(v)
            labels.append(f"{comp}={v:g}")
            per_seed.append(dev)
            cols["value"].append(v)
            cols["test_after"].append(_mean_sd(_vals(runs, "test_after"))[0])
            cols["gd_mean"].append(_mean_sd(_vals(runs, lambda r: (r.get("monitor") or {}).get("gd_mean_run")))[0])
            status.append(_failures(runs) or "done")
            ids.append([r["id"] for r in runs])
            rows.append([SYMBOL[comp], f"{v:g}" + (" (baseline)" if v == baseline()["params"][comp] else ""),
                         f"**{_fmt(dev)}**", _fmt(_vals(runs, "best_step"), 0), _fmt(_vals(runs, "test_after")),
                         _fmt(_vals(runs, lambda r: (r.get("monitor") or {}).get("gd_mean_run")), 3),
                         _fmt(_vals(runs, _last("mu_pos"))), _fmt(_vals(runs, _last("mu_neg"))),
                         _failures(runs) or "ok"])
        title = {"m": "GD: margin m", "tau": "W: temperature τ", "r": "R: ratio r"}[comp]
        panels[title] = (values, np.array(means), np.array(sds) if ctx.scale.seeds > 1 else None)
        failed[title] = bad
    ctx.figure("fig6", plot.component_sweeps(panels, reference=before, failed=failed,
                                             suptitle="Eq. 5 baseline, one component varied (STS-B dev, best step)"))
    ctx.result("fig6", _table_result(labels, np.array(per_seed), "best STS-B dev Spearman × 100", cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Fig. 6 at CPU scale: the Eq. 5 baseline, one component varied",
        "GD = 1[c_p − max_k c_k < m], W = softmax(c/τ), R = r (baseline m = 0.3, τ = 0.05, r = 1); each row varies "
        "one of them. Score: best STS-B dev Spearman × 100 over the dev evaluations (the checkpoint the paper keeps); "
        f"before training: {before:.2f}. 'GD mean' is the monitor's mean GD of the trained loss over the run.",
        _row_table(["component", "value", "best dev", "best step", "test (best dev)", "GD mean", "μ_pos →",
                    "μ_neg →", "status"], rows))


def build_fig5(ctx: Context) -> None:
    from gradlab import plot

    panels, rows, labels, per_seed, status, ids = {}, [], [], [], [], []
    cols: dict[str, list] = {"heldout_cos_pos": [], "heldout_cos_neg": []}
    edges = None
    for name, loss in (("baseline (GD = indicator, m = 0.3)", baseline()), ("GD ≡ 1", baseline(m=GD_ONE_M))):
        runs = ctx.runs(loss)
        held = [h for h in (_heldout(r) for r in runs) if h is not None]
        if held:
            edges = held[0]["after/cos_edges"]
            panels[name] = {k.replace("after/cos_", "").replace("_hist", ""): sum(h[k] for h in held)
                            for k in ("after/cos_pos_hist", "after/cos_neg_hist")}
            panels[name].update({f"{k}_before": sum(h[f"before/cos_{k}_hist"] for h in held) for k in ("pos", "neg")})
        dev = _vals(runs, "best_dev")
        cpos = _vals(runs, lambda r: r["heldout"]["after"]["cos_pos_mean"])
        cneg = _vals(runs, lambda r: r["heldout"]["after"]["cos_neg_mean"])
        labels.append(name)
        per_seed.append(dev)
        cols["heldout_cos_pos"].append(_mean_sd(cpos)[0])
        cols["heldout_cos_neg"].append(_mean_sd(cneg)[0])
        status.append(_failures(runs) or "done")
        ids.append([r["id"] for r in runs])
        rows.append([name, f"**{_fmt(dev)}**", _fmt(_vals(runs, "test_after")), _fmt(cpos, 3), _fmt(cneg, 3),
                     _fmt(_vals(runs, lambda r: r["heldout"]["after"]["mu_pos"]), 3),
                     _fmt(_vals(runs, lambda r: r["heldout"]["after"]["mu_neg"]), 3), _failures(runs) or "ok"])
    if panels:
        ctx.figure("fig5", plot.cosine_histograms(edges, panels, suptitle="held-out cosines after training "
                                                                          "(dotted: before)"))
    ctx.result("fig5", _table_result(labels, np.array(per_seed), "best STS-B dev Spearman × 100", cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Fig. 5 at CPU scale: does GD matter?",
        "The Eq. 5 baseline against the same loss with its gate always open (m = 4 > 2 ≥ c_p − max c_k, so GD ≡ 1). "
        "Cosines are measured on held-out news sentences (10% of the corpus, never trained on), two dropout views "
        "each, in batches of N.",
        _row_table(["loss", "best dev", "test (best dev)", "held-out cos(anchor, positive)",
                    "held-out cos(anchor, negative)", "held-out μ_pos", "held-out μ_neg", "status"], rows))


def build_fig7(ctx: Context) -> None:
    from gradlab import plot

    runs = ctx.runs(baseline())
    series, rows, table = {}, [], {}
    for phase in ("before", "after"):
        per = np.array([_vals(runs, lambda r, k=k, p=phase: r["heldout"][p][f"hardest_share/{k:g}"])
                        for k in HELDOUT_TAUS])  # (tau, seed)
        table[phase] = per
        m = np.array([_mean_sd(row)[0] for row in per])
        sd = np.array([np.nan if _mean_sd(row)[1] is None else _mean_sd(row)[1] for row in per])
        series[f"{phase} training"] = (m, sd if ctx.scale.seeds > 1 else None)
    for i, k in enumerate(HELDOUT_TAUS):
        rows.append([f"{k:g}", _fmt(table["before"][i], 3), _fmt(table["after"][i], 3)])
    ctx.figure("fig7", plot.weight_share_before_after(np.array(HELDOUT_TAUS), series,
                                                      title="hardest negative's share of W (held-out, baseline)"))
    from gradlab.io import Result

    ctx.result("fig7", Result(dims=("tau",), coords={"tau": np.array(HELDOUT_TAUS)}, mean=series["after training"][0],
                              extra={"before": series["before training"][0], "after_per_seed": table["after"],
                                     "before_per_seed": table["before"]},
                              meta={"statistic": "hardest negative's share of softmax(c/τ), held-out, after training",
                                    "failures": _failures(runs)}))
    ctx.markdown(
        "Li et al. 2024 Fig. 7 at CPU scale: the hardest negative's share of W per τ",
        "Share of the hardest negative in W = softmax_j(c_ij'/τ) per anchor, averaged over held-out batches of N, "
        f"with the initial encoder and with the best-dev checkpoint of the Eq. 5 baseline. {_failures(runs)}",
        _row_table(["τ", "share before training", "share after training"], rows))


def build_fig8(ctx: Context) -> None:
    from gradlab import plot
    from gradlab.io import Result

    # (a) Lemma-1 minimum ratios, held-out, before / after
    runs = ctx.runs(baseline())
    held = [h for h in (_heldout(r) for r in runs) if h is not None]
    rows_a = []
    if held:
        edges = held[0]["after/lemma1_edges"]
        panels = {f"λ = {lam:g}": {"before": sum(h[f"before/lemma1_hist/{lam:g}"] for h in held),
                                   "after": sum(h[f"after/lemma1_hist/{lam:g}"] for h in held)}
                  for lam in HELDOUT_LAMBDAS}
        ctx.figure("fig8a", plot.min_ratio_histograms(edges, panels, suptitle="Lemma-1 minimum ratio, held-out "
                                                                             "(baseline training)"))
        hist = np.array([[panels[f"λ = {lam:g}"][p] for p in ("before", "after")] for lam in HELDOUT_LAMBDAS])
        centers = (edges[1:] + edges[:-1]) / 2
        with np.errstate(all="ignore"):
            means = (hist * centers).sum(-1) / hist.sum(-1)
        ctx.result("fig8a", Result(dims=("lam",), coords={"lam": np.array(HELDOUT_LAMBDAS), "bin": centers},
                                   mean=means[:, 1], extra={"before": means[:, 0], "histogram": hist},
                                   extra_dims={"histogram": ("lam", "phase", "bin")},
                                   meta={"statistic": "mean Lemma-1 minimum ratio (feasible anchors), after"}))
        for i, lam in enumerate(HELDOUT_LAMBDAS):
            feas = [_fmt(_vals(runs, lambda r, p=p, lam=lam: r["heldout"][p][f"lemma1_feasible/{lam:g}"]), 3)
                    for p in ("before", "after")]
            rows_a.append([f"{lam:g}", *(f"{x:.3f}" if np.isfinite(x) else "n/a (never feasible)"
                                         for x in means[i]), *feas])
    # (b) dynamic ratios of ArcCon and MET over their own training
    lines_b, named_b, rows_b = {}, {}, []
    for name in ("arccon", "met"):
        r_runs = ctx.runs(name)
        steps, mean, sd, _ = _stacked(r_runs, f"ratio/{name}")
        lines_b[TITLES[name]] = (steps, mean, sd)
        named_b[name] = mean
        finite = mean[np.isfinite(mean)]
        rows_b.append([TITLES[name], _fmt(_vals(r_runs, "best_dev")),
                       f"{finite.mean():.3f}" if finite.size else "n/a (GD below threshold throughout)",
                       f"{finite[0]:.3f} → {finite[-1]:.3f}" if finite.size else "n/a",
                       f"{finite.size} of {mean.size}", _failures(r_runs) or "ok"])
    # (c) anchor–positive cosine over steps per r
    lines_c, named_c, rows_c = {}, {}, []
    for r in RATIO_SWEEP:
        r_runs = ctx.runs(baseline(r=r))
        steps_c, mean, sd, _ = _stacked(r_runs, "cos_pos_mean")
        lines_c[f"r = {r:g}"] = (steps_c, mean, sd)
        named_c[f"r={r:g}"] = mean
        rows_c.append([f"{r:g}", _fmt(_vals(r_runs, "best_dev")), f"{mean[-1]:.3f}" if mean.size else "n/a",
                       _failures(r_runs) or "ok"])
    ctx.figure("fig8bc", plot.step_series({"(b) dynamic ratio R": lines_b, "(c) mean cos(anchor, positive)": lines_c},
                                          suptitle="over training steps (monitored batches)"))
    if lines_b[TITLES["arccon"]][0].size:
        ctx.result("fig8b", _series_result(lines_b[TITLES["arccon"]][0], named_b, "monitored dynamic ratio (own loss)"))
    if lines_c and next(iter(lines_c.values()))[0].size:
        ctx.result("fig8c", _series_result(next(iter(lines_c.values()))[0], named_c, "monitored mean cos(anchor, pos)"))
    ctx.markdown(
        "Li et al. 2024 Fig. 8 at CPU scale: Lemma-1 ratios, dynamic ratios, the static ratio r",
        "(a) Lemma-1 minimum ratio r_low of the hardest negative per held-out anchor (feasible anchors), before and "
        "after baseline training; (b) the monitor's mean dynamic ratio Σ W R / Σ W of ArcCon and MET while each "
        "trains (a record has no R when no anchor's GD passes the monitor's threshold); (c) the monitor's mean "
        "anchor–positive cosine while the baseline trains with r ∈ {0.5, 1, 1.5, 2}.",
        ["(a)", "", *_row_table(["λ", "mean r_low before", "mean r_low after", "feasible before", "feasible after"],
                                rows_a),
         "", "(b)", "", *_row_table(["loss", "best dev", "mean R over records", "R first → last", "records with R",
                                     "status"], rows_b),
         "", "(c)", "", *_row_table(["r", "best dev", "cos(anchor, positive) at the last record", "status"], rows_c)])


def build_fig9(ctx: Context) -> None:
    from gradlab import plot

    runs = ctx.runs(baseline())
    panels, named, rows = {}, {}, []
    labels = {"mu_pos": "μ_pos", "mu_neg": "μ_neg", "sigma_pos": "σ_pos", "sigma_neg": "σ_neg"}
    steps = np.zeros(0)
    for key, lab in labels.items():
        steps, mean, sd, _ = _stacked(runs, key)
        panels[lab] = {lab: (steps, mean, sd)}
        named[key] = mean
    ctx.figure("fig9", plot.step_series(panels, ncols=4, suptitle="Eq. 5 baseline: monitored angle statistics "
                                                                  "(radians)"))
    if steps.size:
        ctx.result("fig9", _series_result(steps, named, "monitored angle statistics over training (mean over seeds)"))
        for i in sorted({0, steps.size // 2, steps.size - 1}):
            rows.append([f"{steps[i]:g}", *(f"{named[k][i]:.3f}" for k in labels)])
    ctx.markdown(
        "Li et al. 2024 Fig. 9 at CPU scale: μ_pos, μ_neg, σ_pos, σ_neg over baseline training",
        f"The ParadigmMonitor's estimates on the training batches (two dropout views), every "
        f"{ctx.scale.monitor_every} steps, mean over seeds. {_failures(runs)}",
        _row_table(["step", *labels.values()], rows))


def _table3_rows(ctx: Context):
    order = [TABLE3_REFERENCE] + [n for pair in TABLE3_PAIRS for n in pair]
    out = {}
    for name in order:
        runs = ctx.runs(name)
        out[name] = runs
    return out


def build_table3(ctx: Context) -> None:
    by = _table3_rows(ctx)
    rows, labels, per_seed, status, ids = [], [], [], [], []
    cols: dict[str, list] = {"test_before": [], "best_dev": [], "mu_neg_last": [], "m_o_last": []}
    for name, runs in by.items():
        role = "reference" if name == TABLE3_REFERENCE else next(
            "original" if a == name else "modified" for a, b in TABLE3_PAIRS if name in (a, b))
        after, before = _vals(runs, "test_after"), _vals(runs, "test_before")
        rows.append([role, TITLES[name], _fmt(before), f"**{_fmt(after)}**", _fmt(after - before),
                     _fmt(_vals(runs, "best_dev")), _fmt(_vals(runs, "best_step"), 0),
                     _fmt(_vals(runs, _last("mu_pos"))), _fmt(_vals(runs, _last("mu_neg"))),
                     _fmt(_vals(runs, _last("m_o"))), _fmt(_vals(runs, "seconds"), 0), _failures(runs) or "ok"])
        labels.append(name)
        per_seed.append(after)
        status.append(_failures(runs) or "done")
        ids.append([r["id"] for r in runs])
        cols["test_before"].append(_mean_sd(before)[0])
        cols["best_dev"].append(_mean_sd(_vals(runs, "best_dev"))[0])
        cols["mu_neg_last"].append(_mean_sd(_vals(runs, _last("mu_neg")))[0])
        cols["m_o_last"].append(_mean_sd(_vals(runs, _last("m_o")))[0])
    ctx.result("table3", _table_result(labels, np.array(per_seed), "STS-B test Spearman × 100 (best-dev checkpoint)",
                                       cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Table 3 at CPU scale: original vs modified losses",
        "Each loss at its registry defaults (Li et al. 2024 Table 4 values); the best-dev checkpoint is scored on "
        "STS-B test (1,379 pairs). μ_pos, μ_neg (radians) and the center ratio m_o (Zhang et al. 2022) are the "
        "monitor's values at the last monitored step.",
        _row_table(["pair", "loss", "test before", "test after (best dev)", "Δ", "best dev", "best step", "μ_pos →",
                    "μ_neg →", "m_o →", "s/run", "status"], rows))


def build_fig1(ctx: Context) -> None:
    from gradlab import plot

    by = _table3_rows(ctx)
    stat = {n: _mean_sd(_vals(runs, "test_after")) for n, runs in by.items()}
    before = _mean_sd(_vals(by[TABLE3_REFERENCE], "test_before"))[0]
    pairs = [(TITLES[a], stat[a], TITLES[b], stat[b]) for a, b in TABLE3_PAIRS]
    ctx.figure("fig1", plot.ori_mod_bars(pairs, reference=(TITLES[TABLE3_REFERENCE], stat[TABLE3_REFERENCE]),
                                         baseline=before, title="original vs modified (STS-B test, best dev)"))
    from gradlab.io import Result

    names = [n for pair in TABLE3_PAIRS for n in pair]
    ctx.result("fig1", Result(dims=("loss",), coords={"loss": np.array(names, dtype=str)},
                              mean=np.array([stat[n][0] for n in names]),
                              extra={"sd": np.array([np.nan if stat[n][1] is None else stat[n][1] for n in names])},
                              meta={"statistic": "STS-B test Spearman × 100 (best-dev checkpoint)",
                                    "reference": {"loss": TABLE3_REFERENCE, "mean": stat[TABLE3_REFERENCE][0]},
                                    "before": before}))
    rows = [[f"{TITLES[a]} vs {TITLES[b]}", _fmt(_vals(by[a], "test_after")), _fmt(_vals(by[b], "test_after")),
             f"{stat[b][0] - stat[a][0]:+.2f}", _failures(by[a] + by[b]) or "ok"] for (a, b) in TABLE3_PAIRS]
    ctx.markdown("Li et al. 2024 Fig. 1 at CPU scale: original vs modified (bars)",
                 f"The numbers of the table3 study drawn as bars; dotted: before training ({before:.2f}), dashed: "
                 "InfoNCE.", _row_table(["pair", "original", "modified", "modified − original", "status"], rows))


def _trajectory_name(loss: Any) -> str:
    """A file-name stem for a trajectory run: the name, ``baseline``, or the loss's own label."""
    if isinstance(loss, str):
        return loss
    if loss.get("loss") == "baseline" and loss.get("params") == baseline()["params"]:
        return "baseline"
    label = loss_label(loss)
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label).strip("_")


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
        if run.get("status") != "done":
            rows.append([_title(loss), "", "", "", f"failed: {run.get('error')}"])
            continue
        path = run_path(run["dir"])
        res = trajectory(resolve_loss(run["spec"]["loss"]), path, batch_size=ctx.scale.batch_size, grid=grid,
                         batches=batches)
        meta = res["path"].meta
        t = TITLES.get(name, name) if isinstance(loss, str) or name == "baseline" else _title(loss)
        ctx.figure(f"trajectory_{name}", plot.trajectory_on_maps(
            [res["gd"], res["ratio"]], path["mu_pos"], path["mu_neg"], titles=["simulated GD", "simulated ratio R"],
            quantities=["gd", "ratio"], ranges=[(0.0, 1.0), (0.0, 3.0)],
            suptitle=f"{t}: training path (seed 0) on its own simulated maps\n(σ_pos={meta['sigma_pos']:.3f}, "
                     f"σ_neg={meta['sigma_neg']:.3f}, N={ctx.scale.batch_size})"))
        for key in ("gd", "ratio", "path"):
            ctx.result(f"trajectory_{name}_{key}", res[key])
        gd_path = res["path"].mean
        rows.append([t, f"({path['mu_pos'][0]:.3f}, {path['mu_neg'][0]:.3f}) → ({path['mu_pos'][-1]:.3f}, "
                        f"{path['mu_neg'][-1]:.3f})", f"{meta['sigma_pos']:.3f}, {meta['sigma_neg']:.3f}",
                     f"{gd_path[0]:.3f} → {gd_path[-1]:.3f}", "ok"])
    ctx.markdown(
        "Real training on the paper's maps: monitored (μ_pos, μ_neg) paths",
        f"Each run's monitored path (seed 0) drawn on the GD map and ratio map of its own loss, simulated "
        f"(Li et al. 2024 Sec. 3.1 protocol, {grid}×{grid} grid, {batches} batches per cell) with the run's batch "
        "size and the mean σ_pos, σ_neg the monitor measured. 'simulated GD' is the map's value at the path's first "
        "and last cells.",
        _row_table(["loss", "path (μ_pos, μ_neg) first → last", "σ_pos, σ_neg", "simulated GD first → last",
                    "status"], rows))


BUILDERS: dict[str, Callable[[Context], None]] = {
    "fig6": build_fig6, "fig5": build_fig5, "fig7": build_fig7, "fig8": build_fig8, "fig9": build_fig9,
    "table3": build_table3, "fig1": build_fig1, "trajectory": build_trajectory,
}
