"""Li et al. 2024 Table 3 and Fig. 1 at CPU scale, and Table 3 under SimCSE's recipe (``simcse``).

Table 3 reports STS test scores, so each claim is decided on STS-B test (the best-dev checkpoint)
by a paired t test over the seeds, with best dev as the other split (a significant reversal there
makes it partial). "Comparable" is an equivalence claim: TOST within ±1 STS point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gradlab.experiments._build_components import LIGHT_SETTING
from gradlab.experiments._studies import (
    DEFAULT_SEEDS,
    NU_GRID,
    SIMCSE_LOSSES,
    TABLE3_CLAIMS,
    TABLE3_PAIRS,
    TABLE3_PAPER_BERT,
    TABLE3_REFERENCE,
    nu_losses,
)
from gradlab.experiments._tables import (
    RUN_KEYS,
    Context,
    ci_half,
    export,
    failures,
    fmt,
    label,
    last,
    mean_sd,
    row_table,
    table_result,
    values,
)
from gradlab.experiments.stats import EQUIVALENCE_MARGIN, compare, equivalence, paired_t

__all__ = ["build_table3", "build_fig1", "build_simcse", "dev_test_claim", "simcse_claims", "simcse_comparisons", "simcse_usable",
           "never_trained"]


def never_trained(runs: Sequence[dict]) -> bool:
    """Every finished run kept its starting checkpoint (best dev at step 0)."""
    steps = values(runs, "best_step")
    return bool(np.isfinite(steps).any() and np.all(steps[np.isfinite(steps)] == 0))


def dev_test_claim(ctx: Context, key: str, cid: str, weaker: Sequence[dict], stronger: Sequence[dict], *,
                   paper: str, row: str, claim: str, setting: str) -> list[str]:
    """The claim that ``stronger`` beats ``weaker``: a paired t test on STS-B test (the paper's split) with
    best dev as the other split; numbers ``claim.<key>.*``; returns the comparison's table row."""
    a, b = values(weaker, "test_after"), values(stronger, "test_after")
    a_dev, b_dev = values(weaker, "best_dev"), values(stronger, "best_dev")
    entry = compare(a, b, expect=+1, split="STS-B test", other=(a_dev, b_dev), other_split="STS-B dev (best)")
    t, d = paired_t(a, b), paired_t(a_dev, b_dev)
    for k, v in (("test_diff", t.estimate), ("test_p", t.p), ("dev_diff", d.estimate), ("dev_p", d.p)):
        ctx.number(f"claim.{key}.{k}", v)
    ctx.number(f"claim.{key}.test_ci95", list(t.ci95))
    if never_trained(weaker):
        claim += "; the original never trained here (best dev at step 0 in every seed)"
    ctx.claim(cid, paper=paper, claim=claim, test=entry, setting=setting,
              finding=f"STS-B test {t.estimate:+.2f}, best dev {d.estimate:+.2f} (p = {d.p:.2g})")
    return [row, f"{t.estimate:+.2f} [{t.ci95[0]:+.2f}, {t.ci95[1]:+.2f}]", f"{t.p:.2g}",
            f"{d.estimate:+.2f} [{d.ci95[0]:+.2f}, {d.ci95[1]:+.2f}]", f"{d.p:.2g}"]


def _role(name: str) -> str:
    """reference / original / modified (Table 3's pairs) / claim: weaker / claim: stronger (its other claims)."""
    if name == TABLE3_REFERENCE:
        return "reference"
    for roles, pairs in ((("original", "modified"), TABLE3_PAIRS), (("claim: weaker", "claim: stronger"), TABLE3_CLAIMS)):
        for pair in pairs:
            if name in pair:
                return roles[pair.index(name)]
    raise ValueError(f"{name!r} is not a Table 3 loss")


def _tuned(ctx: Context, name: str) -> tuple[dict[str, Any] | None, list[dict], bool]:
    """The ν of ``NU_GRID[name]`` with the best mean dev score (selection on dev only), its runs, and whether
    it lies at an edge of the grid (the optimum may then lie beyond it)."""
    grid = nu_losses(name)
    devs = [mean_sd(values(ctx.runs(loss), "best_dev"))[0] for loss in grid]
    finite = [i for i, d in enumerate(devs) if math.isfinite(d)]
    if not finite:
        return None, [], False
    best = max(finite, key=lambda i: devs[i])
    top = max(grid[1:], key=lambda loss: tuple(loss["params"].values()))  # the largest ν of the decades tried
    edge = grid[best] is top or best == 0
    return grid[best], ctx.runs(grid[best]), edge


def _nu_text(loss: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v:g}" for k, v in loss["params"].items())


TABLE3_SETTING = f"STS-B test, best-dev checkpoint; {LIGHT_SETTING}; paper: 7-task STS avg."


def build_table3(ctx: Context) -> None:
    names = list(dict.fromkeys([TABLE3_REFERENCE, *(n for pair in (*TABLE3_PAIRS, *TABLE3_CLAIMS) for n in pair)]))
    entries: list[tuple[str, str, Any]] = []  # (role, label, loss)
    for name in names:
        if name in NU_GRID:
            entries += [(_role(name), f"{label(name)} ({_nu_text(loss)}{', default' if i == 0 else ''})", loss)
                        for i, loss in enumerate(nu_losses(name))]
        else:
            entries.append((_role(name), label(name), name))
    rows, labels, per_seed, status, ids = [], [], [], [], []
    cols: dict[str, list] = {"test_before": [], "best_dev": [], "mu_neg_last": [], "m_o_last": []}
    for role, text, loss in entries:
        runs = ctx.runs(loss)
        after, before = values(runs, "test_after"), values(runs, "test_before")
        rows.append([role, text, fmt(before), f"**{fmt(after)}**", fmt(after - before), fmt(values(runs, "best_dev")),
                     fmt(values(runs, "best_step"), 0), fmt(values(runs, last("mu_pos"))),
                     fmt(values(runs, last("mu_neg"))), fmt(values(runs, last("m_o"))),
                     fmt(values(runs, RUN_KEYS["gd_run"]), 3), fmt(values(runs, "seconds"), 0),
                     ("never trained (best step 0); " if never_trained(runs) else "") + (failures(runs) or "ok")])
        labels.append(text)
        per_seed.append(after)
        status.append(failures(runs) or "done")
        ids.append([r["id"] for r in runs])
        for col, v in (("test_before", before), ("best_dev", values(runs, "best_dev")),
                       ("mu_neg_last", values(runs, last("mu_neg"))), ("m_o_last", values(runs, last("m_o")))):
            cols[col].append(mean_sd(v)[0])
        export(ctx, loss if isinstance(loss, str) else f"{loss['loss']}[{_nu_text(loss)}]", runs, RUN_KEYS)

    comp_rows, paper = [], "Li et al. 2024, Table 3"

    def compare_runs(cid: str, weaker: str, wruns: list[dict], stronger: str, sruns: list[dict], claim: str) -> None:
        comp_rows.append(dev_test_claim(ctx, cid, f"li2024-table3-{cid}", wruns, sruns, paper=paper,
                                        row=f"{stronger} vs {weaker}", claim=claim, setting=TABLE3_SETTING))

    for orig, mod in TABLE3_PAIRS:
        mruns = ctx.runs(mod)
        if orig in NU_GRID:
            default = nu_losses(orig)[0]
            compare_runs(f"{mod}-untuned", f"{label(orig)} ({_nu_text(default)})", ctx.runs(default), label(mod),
                         mruns, f"{label(mod)} beats {label(orig)} (original at its default ν)")
            tuned, truns, edge = _tuned(ctx, orig)
            if tuned is not None:
                ctx.number(f"{orig}.tuned", tuned["params"])
                ctx.number(f"{orig}.tuned_at_edge", edge)
                where = ")"
                if edge:  # flat over the top two decades (a plateau), or still rising past the grid?
                    grid = nu_losses(orig)
                    lower = {k: v / 100 if k != "nu1" else v for k, v in grid[-1]["params"].items()}
                    below = next((g for g in grid if g["params"] == lower), grid[-3])
                    top = paired_t(values(ctx.runs(below), "best_dev"), values(ctx.runs(grid[-1]), "best_dev"))
                    ctx.number(f"{orig}.top_two_decades.dev_diff", top.estimate)
                    ctx.number(f"{orig}.top_two_decades.dev_ci95", list(top.ci95))
                    ctx.number(f"{orig}.top_two_decades.from", below["params"])
                    where = (f"; best at the grid's top: from {_nu_text(below)} to {_nu_text(grid[-1])} best dev "
                             f"changes by {top.estimate:+.2f} [95 % CI {top.ci95[0]:+.2f}, {top.ci95[1]:+.2f}])")
                compare_runs(f"{mod}-tuned", f"{label(orig)} ({_nu_text(tuned)}, dev-tuned)", truns, label(mod), mruns,
                             f"{label(mod)} beats {label(orig)} (original with ν tuned on dev{where}")
        else:
            compare_runs(mod, label(orig), ctx.runs(orig), label(mod), mruns, f"{label(mod)} beats {label(orig)}")
    for weak, strong in TABLE3_CLAIMS:
        compare_runs(strong, label(weak), ctx.runs(weak), label(strong), ctx.runs(strong),
                     f"{label(strong)} beats {label(weak)}")
    ref = values(ctx.runs(TABLE3_REFERENCE), "test_after")
    for _, mod in TABLE3_PAIRS:
        mod_test = values(ctx.runs(mod), "test_after")
        ctx.claim(f"li2024-table3-{mod}-comparable", paper=paper, setting=TABLE3_SETTING,
                  claim=f"{label(mod)} is comparable to InfoNCE (an effective loss; within ±{EQUIVALENCE_MARGIN:g} "
                        "STS point)", test=equivalence(ref, mod_test, split="STS-B test"),
                  finding=f"STS-B test, {label(mod)} − InfoNCE: {paired_t(ref, mod_test).estimate:+.2f}")
    t = paired_t(ref, values(ctx.runs("align_mhs"), "test_after"))
    ctx.number("align_mhs_vs_infonce.test_diff", t.estimate)
    ctx.number("align_mhs_vs_infonce.test_p", t.p)

    ctx.result("table3", table_result(labels, np.array(per_seed), "STS-B test Spearman × 100 (best-dev checkpoint)",
                                      cols, status, ids))
    ctx.markdown(
        "Li et al. 2024 Table 3 at CPU scale: original vs modified losses, and the other claims",
        "Each loss at its registry defaults (Li et al. 2024 Table 4 values); Barlow Twins and VICReg also over a ν "
        "grid (ours: Li et al. 2024 App. A.4 tunes only the modified losses), the tuned ν chosen by mean best dev. "
        "The best-dev checkpoint is scored on STS-B test (1,379 pairs). μ_pos, μ_neg (radians) and the center ratio "
        "m_o (Zhang et al. 2022) are the monitor's values at the last monitored state; 'GD mean' is the trained "
        "loss's mean GD over the run.",
        [*row_table(["role", "loss", "test before", "test after (best dev)", "Δ", "best dev", "best step", "μ_pos →",
                     "μ_neg →", "m_o →", "GD mean", "s/run", "status"], rows),
         "", "Comparisons (paired t over the seeds, two-sided; Δ with its 95 % interval):", "",
         *row_table(["comparison", "Δ test [95 % CI]", "p (test)", "Δ best dev [95 % CI]", "p (dev)"], comp_rows)])


def build_fig1(ctx: Context) -> None:
    from gradlab import plot
    from gradlab.io import Result

    by = {name: ctx.runs(name) for name in [TABLE3_REFERENCE] + [n for pair in TABLE3_PAIRS for n in pair]}
    stat = {n: (mean_sd(values(runs, "test_after"))[0], ci_half(values(runs, "test_after"))) for n, runs in by.items()}
    before = mean_sd(values(by[TABLE3_REFERENCE], "test_before"))[0]
    pairs = [(label(a), stat[a], label(b), stat[b]) for a, b in TABLE3_PAIRS]
    ctx.figure("fig1", plot.ori_mod_bars(pairs, reference=(label(TABLE3_REFERENCE), stat[TABLE3_REFERENCE]),
                                         baseline=before, title="original vs modified (STS-B test, best dev; "
                                                                "error bars: 95 % interval over seeds)"))
    names = [n for pair in TABLE3_PAIRS for n in pair]
    ctx.result("fig1", Result(dims=("loss",), coords={"loss": np.array(names, dtype=str)},
                              mean=np.array([stat[n][0] for n in names]),
                              extra={"ci95_half": np.array([stat[n][1] for n in names])},
                              meta={"statistic": "STS-B test Spearman × 100 (best-dev checkpoint)",
                                    "reference": {"loss": TABLE3_REFERENCE, "mean": stat[TABLE3_REFERENCE][0]},
                                    "before": before}))
    for n, runs in by.items():
        m, sd = mean_sd(values(runs, "test_after"))
        ctx.number(f"{n}.test.mean", m)
        ctx.number(f"{n}.test.sd", sd)
    ctx.number("test_before", before)
    rows = []
    for a, b in TABLE3_PAIRS:
        t = paired_t(values(by[a], "test_after"), values(by[b], "test_after"))
        rows.append([f"{label(a)} vs {label(b)}", fmt(values(by[a], "test_after")), fmt(values(by[b], "test_after")),
                     f"{t.estimate:+.2f} [{t.ci95[0]:+.2f}, {t.ci95[1]:+.2f}]", failures(by[a] + by[b]) or "ok"])
    ctx.markdown("Li et al. 2024 Fig. 1 at CPU scale: original vs modified (bars)",
                 f"The numbers of the table3 study drawn as bars; dotted: before training ({before:.2f}), dashed: "
                 "InfoNCE. The verdicts are the table3 study's.",
                 row_table(["pair", "original", "modified", "modified − original [95 % CI, paired]", "status"], rows))


SIMCSE_SETTING = ("{metric} with {pooling}, best-dev checkpoint; {model} under SimCSE's recipe, {steps} steps on "
                  "{corpus} (paper: BERT-base, an epoch of 10^6 Wikipedia sentences, 15,625 steps, 7-task STS avg.)")
#: The run statistics of the simcse study: the shared ones and SentEval's seven-task STS average.
SIMCSE_KEYS = {**RUN_KEYS, "sts_avg": lambda r: (r.get("sts_after") or {}).get("avg"),
               "sts_avg_before": lambda r: (r.get("sts_before") or {}).get("avg")}


def simcse_setting(scale: Mapping[str, Any], *, senteval: bool) -> str:
    """Where the simcse claims are tested, from the study's scale (``Scale.run.to_dict()``)."""
    pooling = scale.get("pooling")
    corpus = scale.get("corpus", "NewsArticles")
    return SIMCSE_SETTING.format(
        metric="SentEval's 7-task STS avg." if senteval else "STS-B test",
        pooling="[CLS] before the MLP" if pooling is None else f"{pooling} pooling (training and evaluation)",
        model="all-MiniLM-L6-v2" if scale.get("encoder") == "minilm" else "the checkpoint "
              f"{str(scale.get('encoder_sha256') or scale.get('encoder'))[:12]}",
        steps=scale["steps"],
        corpus=f"the corpus file {str(scale.get('corpus_sha256'))[:12]} (the paper's setting when it is wiki1m)"
        if scale.get("corpus_sha256") else f"{corpus} news sentences")


def _seeds(numbers: Mapping[str, Any], loss: str, key: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in numbers[f"{loss}.{key}.seeds"]], float)


def simcse_comparisons(numbers: Mapping[str, Any]) -> dict[str, Any]:
    """Each modified loss against InfoNCE from the per-seed numbers, paired over the seeds:
    ``claim.<loss>.test_diff`` / ``test_p`` / ``test_ci95`` / ``dev_diff`` / ``dev_p``."""
    out: dict[str, Any] = {}
    for name in SIMCSE_LOSSES[1:]:
        t = paired_t(_seeds(numbers, TABLE3_REFERENCE, "test"), _seeds(numbers, name, "test"))
        d = paired_t(_seeds(numbers, TABLE3_REFERENCE, "best_dev"), _seeds(numbers, name, "best_dev"))
        out.update({f"claim.{name}.test_diff": t.estimate, f"claim.{name}.test_p": t.p,
                    f"claim.{name}.test_ci95": list(t.ci95), f"claim.{name}.dev_diff": d.estimate,
                    f"claim.{name}.dev_p": d.p})
    return out


def simcse_usable(best_step: np.ndarray, last_step: np.ndarray) -> tuple[np.ndarray, str]:
    """Which seeds of one arm a claim may use, and why the others may not.

    A seed counts when its best dev comes after state 0 (the trained model improved on the one it
    started from) and before its last evaluation (its dev curve turned). The reason names the
    seeds of each kind that do not count ("" when all count).

    Examples:
      >>> use, why = simcse_usable(np.array([0., 10., 40., 20.]), np.array([40., 40., 40., 40.]))
      >>> use.tolist(), why
      ([False, True, False, True], 'best dev at state 0 (never improved) in 1, at the last evaluation (still improving) in 1')
    """
    at_start, at_end = best_step <= 0, best_step >= last_step
    parts = [f"{what} in {int(k.sum())}" for what, k in
             (("best dev at state 0 (never improved)", at_start), ("at the last evaluation (still improving)", at_end))
             if k.any()]
    return ~(at_start | at_end), ", ".join(parts)


def simcse_claims(numbers: Mapping[str, Any], scale: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The simcse study's Table 3 claims from its exported per-seed numbers (``<loss>.test.seeds``,
    ``.best_dev.seeds``, ``.best_step.seeds``, ``.last_step.seeds``): each modified loss is comparable
    to InfoNCE (Li et al. 2024 Sec. 4: "comparable to that of effective contrastive losses"), by TOST
    within ±``EQUIVALENCE_MARGIN`` STS point paired over the seeds, decided only on the seed pairs
    that :func:`simcse_usable` accepts in both arms and only with at least ``DEFAULT_SEEDS`` of them;
    else "not tested", with the reason.

    A numbers file without ``last_step`` (written before it was recorded) takes the scale's last
    evaluation step, ``steps`` when ``eval_every`` divides it.
    """
    def seeds(loss: str, key: str) -> np.ndarray:
        if key == "last_step" and f"{loss}.last_step.seeds" not in numbers and scale["steps"] % scale["eval_every"] == 0:
            return np.full(len(numbers[f"{loss}.best_step.seeds"]), float(scale["steps"]))
        return _seeds(numbers, loss, key)

    claims = []
    ref = TABLE3_REFERENCE
    senteval = f"{ref}.sts_avg.seeds" in numbers and np.isfinite(_seeds(numbers, ref, "sts_avg")).any()
    metric, split = ("sts_avg", "SentEval STS avg. (7 tasks)") if senteval else ("test", "STS-B test")
    setting = simcse_setting(scale, senteval=senteval)
    ref_use, ref_why = simcse_usable(seeds(ref, "best_step"), seeds(ref, "last_step"))
    for name in SIMCSE_LOSSES[1:]:
        use, why = simcse_usable(seeds(name, "best_step"), seeds(name, "last_step"))
        use = ref_use & use
        a, b = seeds(ref, metric), seeds(name, metric)
        t = paired_t(a, b)
        claim = {"id": f"li2024-table3-simcse-{name}", "paper": "Li et al. 2024, Table 3", "study": "simcse",
                 "claim": f"{label(name)} is comparable to InfoNCE under SimCSE's recipe (within "
                          f"±{EQUIVALENCE_MARGIN:g} STS point; paper: {label(name)} {TABLE3_PAPER_BERT[name]:.2f}, "
                          f"InfoNCE {TABLE3_PAPER_BERT[ref]:.2f}, BERT-base STS avg.)",
                 "setting": setting,
                 "finding": f"{split}, {label(name)} − InfoNCE: {t.estimate:+.2f} [{t.ci95[0]:+.2f}, "
                            f"{t.ci95[1]:+.2f}] over all {t.n} seeds; usable seed pairs {int(use.sum())} of {use.size}"}
        if use.sum() < DEFAULT_SEEDS:
            reasons = "; ".join(f"{who}: {w}" for who, w in (("InfoNCE", ref_why), (label(name), why)) if w)
            claim.update(kind="not tested", reason=f"{int(use.sum())} usable seed pairs of {use.size} (at least "
                                                   f"{DEFAULT_SEEDS} needed); {reasons or 'too few seeds'}")
        else:
            claim.update(equivalence(a[use], b[use], split=split))
        claims.append(claim)
    return claims


def dev_curves(runs: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, (seed, step) STS-B dev Spearman) of the runs' dev evaluations (NaN: not evaluated or failed)."""
    evals = [{e["step"]: e["dev_spearman"] for e in (r.get("evals") or [])} if r.get("status") == "done" else {}
             for r in runs]
    steps = np.array(sorted(set().union(*evals)), float)
    table = np.array([[ev.get(int(s), np.nan) for s in steps] for ev in evals], float).reshape(len(runs), steps.size)
    return steps, table


def _simcse_curves(ctx: Context) -> None:
    """Every loss's STS-B dev curve (``<loss>.dev_curve``: steps and per-seed values) and their figure."""
    from gradlab import plot

    lines = {}
    for name in SIMCSE_LOSSES:
        steps, table = dev_curves(ctx.runs(name))
        ctx.number(f"{name}.dev_curve", {"steps": steps.tolist(), "seeds": [
            [None if not math.isfinite(v) else float(v) for v in row] for row in table]})
        # how fast dev still moved at the end: the last evaluation minus the one before it, per seed
        gain = table[:, -1] - table[:, -2] if steps.size >= 2 else np.full(len(table), np.nan)
        mean, sd = mean_sd(gain)
        ctx.number(f"{name}.dev_last_gain.mean", mean)
        ctx.number(f"{name}.dev_last_gain.sd", sd)
        with np.errstate(all="ignore"):
            curve = np.nanmean(table, axis=0) if table.size else table
        lines[label(name)] = (steps, curve, ci_half(table, axis=0) if table.size else None)
    title = f"STS-B dev ({'[CLS] before the MLP' if ctx.scale.run.pooling is None else ctx.scale.run.pooling})"
    ctx.figure("simcse_dev", plot.step_series({title: lines}, ylabels={title: "Spearman × 100"},
                                              suptitle="SimCSE's recipe (band: 95 % over seeds)"))


def build_simcse(ctx: Context) -> None:
    """Table 3's InfoNCE vs modified losses under SimCSE's recipe, each modified loss tested against InfoNCE."""
    rows, labels, per_seed, status, ids = [], [], [], [], []
    cols: dict[str, list] = {"test_before": [], "best_dev": [], "paper_bert_sts_avg": []}
    senteval = ctx.scale.run.senteval is not None
    for name in SIMCSE_LOSSES:
        runs = ctx.runs(name)
        after, before = values(runs, "test_after"), values(runs, "test_before")
        rows.append([label(name), fmt(before), f"**{fmt(after)}**", fmt(after - before), fmt(values(runs, "best_dev")),
                     fmt(values(runs, "best_step"), 0), fmt(values(runs, RUN_KEYS["last_step"]), 0),
                     fmt(values(runs, last("mu_pos"))), fmt(values(runs, last("mu_neg"))),
                     fmt(values(runs, RUN_KEYS["gd_run"]), 3), f"{TABLE3_PAPER_BERT[name]:.2f}",
                     fmt(values(runs, "seconds"), 0), failures(runs) or "ok"])
        if senteval:
            rows[-1][1:1] = [fmt(values(runs, SIMCSE_KEYS["sts_avg_before"])), f"**{fmt(values(runs, SIMCSE_KEYS['sts_avg']))}**"]
        labels.append(label(name))
        per_seed.append(after)
        status.append(failures(runs) or "done")
        ids.append([r["id"] for r in runs])
        cols["test_before"].append(mean_sd(before)[0])
        cols["best_dev"].append(mean_sd(values(runs, "best_dev"))[0])
        cols["paper_bert_sts_avg"].append(TABLE3_PAPER_BERT[name])
        export(ctx, name, runs, SIMCSE_KEYS if senteval else RUN_KEYS)
        ctx.number(f"{name}.paper", TABLE3_PAPER_BERT[name])
    _simcse_curves(ctx)
    comparisons = simcse_comparisons(ctx.numbers)
    comp_rows = []
    for name in SIMCSE_LOSSES[1:]:
        for k, v in comparisons.items():
            if k.startswith(f"claim.{name}."):
                ctx.number(k, v)
        c = {k.rsplit(".", 1)[1]: v for k, v in comparisons.items() if k.startswith(f"claim.{name}.")}
        comp_rows.append([f"{label(name)} vs InfoNCE", f"{c['test_diff']:+.2f} [{c['test_ci95'][0]:+.2f}, "
                          f"{c['test_ci95'][1]:+.2f}]", f"{c['test_p']:.2g}", f"{c['dev_diff']:+.2f}", f"{c['dev_p']:.2g}",
                          f"{TABLE3_PAPER_BERT[name] - TABLE3_PAPER_BERT[TABLE3_REFERENCE]:+.2f}"])
    ctx.claims.extend(simcse_claims(ctx.numbers, ctx.scale.to_dict()))
    ctx.result("simcse", table_result(labels, np.array(per_seed), "STS-B test Spearman × 100 (best-dev checkpoint)",
                                      cols, status, ids))
    run = ctx.scale.run
    ctx.markdown(
        "Li et al. 2024 Table 3 under SimCSE's recipe: InfoNCE vs the modified losses",
        "SimCSE's unsupervised recipe (Gao et al. 2021): "
        + ("an MLP over [CLS] in training, [CLS] before the MLP in evaluation (from state 0 on)" if run.pooling is None
           else f"{run.pooling} pooling in training and evaluation, no MLP (SimCSE's --pooler_type {run.pooling})")
        + ", 32-token sentences, two dropout views (p = 0.1), N = "
        f"{run.batch_size}, lr {run.learning_rate:g}; each loss at its registry defaults (Li et al. 2024 Table 4). "
        "The best-dev checkpoint is scored on STS-B test (1,379 pairs). 'paper' is Li et al. 2024 Table 3's "
        "BERT-base STS avg. over seven tasks after an epoch of 10^6 Wikipedia sentences: a different model, "
        "length of training and score, given for the ordering only. μ_pos, μ_neg (radians) are the monitor's "
        "values at the last monitored state; 'GD mean' is the trained loss's mean GD over the run. A claim is "
        "decided only from seed pairs whose best dev comes after state 0 and before their last evaluation, in "
        "both arms. Every dev curve is in simcse.json (`<loss>.dev_curve`)."
        + (" With SentEval, state 0 and the best-dev checkpoint are also scored on its seven STS tasks, and the "
           "claims are decided on their average, the paper's metric." if senteval else ""),
        [*row_table(["loss", *(["STS avg. before", "STS avg. after (best dev)"] if senteval else []), "test before",
                     "test after (best dev)", "Δ", "best dev", "best step", "last evaluation",
                     "μ_pos →", "μ_neg →", "GD mean", "paper", "s/run", "status"], rows),
         "", "Each modified loss against InfoNCE (paired t over the seeds, two-sided):", "",
         *row_table(["comparison", "Δ test [95 % CI]", "p (test)", "Δ best dev", "p (dev)", "Δ paper"], comp_rows)])
