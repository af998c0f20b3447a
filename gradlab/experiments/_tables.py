"""What every study builder shares: the :class:`Context` (records, writers, numbers, claims) and the
tables and exports made from run records.

Every table has one row per configuration; a configuration with a failed seed says so in its row
(``failed: <error>``), never a silently missing row. Spreads in the tables are sample standard
deviations over the seeds that finished; intervals (figures, claims) are 95 % t intervals.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradlab.experiments._spec import TRANSFORM_PREFIX, loss_label
from gradlab.experiments._studies import Scale
from gradlab.experiments.stats import VERDICTS, decide_claims

__all__ = ["Context", "label", "values", "mean_sd", "ci_half", "fmt", "failures", "last", "first", "gd_run",
           "closed_at", "last_eval", "export", "RUN_KEYS", "row_table", "table_result", "heldout", "series",
           "stacked", "series_result", "portable_command"]


def label(name: Any) -> str:
    """A loss's short display name: a registered loss's ``LossSpec.label``, a Rho et al. 2023 transform's
    ``InfoNCE + NAME``, else the loss dict's label."""
    if isinstance(name, Mapping) and str(name.get("loss", "")).startswith(TRANSFORM_PREFIX):
        name = name["loss"]
    if isinstance(name, str) and name.startswith(TRANSFORM_PREFIX):
        kind = name[len(TRANSFORM_PREFIX):]
        return "InfoNCE (β)" if kind == "none" else f"InfoNCE + {kind}"
    if isinstance(name, str):
        from gradlab.losses import get_spec

        return get_spec(name).label
    return loss_label(name)



def portable_command(command: str) -> str:
    """The command line with absolute paths cut to their last component (results name no machine's paths).

    Examples:
      >>> portable_command("gradlab experiment simcse --out /work/exp36")
      'gradlab experiment simcse --out exp36'
    """
    return re.sub(r"(?<![\w.])/(?:[^\s/]+/)*([^\s/]+)", r"\1", command)


class Context:
    """What a builder needs: the records, the scale, where to write, and provenance."""

    def __init__(self, study: str, records: Mapping[str, dict], scale: Scale, out: Path, *, command: str,
                 wall_s: float, executed: int, fmt: str = "png", losses: Sequence[Any] | None = None):
        from gradlab.outputs import Writer

        command = portable_command(command)
        self.study, self.records, self.scale, self.out = study, records, scale, Path(out) / study
        self.command, self.wall_s, self.executed, self.fmt = command, wall_s, executed, fmt
        self.losses = losses  # trajectory: the chosen losses (None: TRAJECTORY_LOSSES)
        self.files: list[Path] = []
        self.numbers: dict[str, Any] = {}
        self.claims: list[dict[str, Any]] = []
        self.writer = Writer(self.out, formats=[fmt], command_line=command, started=time.perf_counter() - wall_s,
                             meta={"study": study, "scale": scale.to_dict(), "seeds": list(range(scale.seeds))})

    def runs(self, loss: Any, seeds: Sequence[int] | None = None) -> list[dict]:
        seeds = range(self.scale.seeds) if seeds is None else seeds
        return [self.records[self.scale.spec(loss, s).id] for s in seeds]

    def figure(self, stem: str, fig) -> None:
        self.files.extend(self.writer.figure(stem, fig))

    def result(self, stem: str, result) -> None:
        self.files.extend(self.writer.result(stem, result))

    def provenance(self) -> dict[str, Any]:
        return self.writer.provenance()

    def number(self, key: str, value: Any) -> Any:
        """Export a number the write-up may quote (``numbers.json``: the write-up is rendered from it)."""
        if isinstance(value, (float, np.floating)):
            value = float(value) if math.isfinite(value) else None
        elif isinstance(value, np.integer):
            value = int(value)
        self.numbers[key] = value
        return value

    def claim(self, cid: str, *, paper: str, claim: str, finding: str, setting: str, test: dict | None = None,
              subclaims: Sequence[dict] | None = None, kind: str | None = None, reason: str = "") -> None:
        """One claim of a paper: decided by ``test`` (a ``stats.claim_entry``), by named ``subclaims``, or
        not decided (``kind`` ``"not tested"`` / ``"descriptive"`` with its ``reason``).

        ``setting`` says on what this study tests it and how far that is from the paper's setting.
        The verdict is set from the Holm-adjusted p (``stats.decide_claims``) when the table is written.
        """
        rec = {"id": cid, "paper": paper, "claim": claim, "finding": finding, "setting": setting,
               "study": self.study}
        if (test is None) + (subclaims is None) + (kind is None) != 2:
            raise ValueError("a claim has exactly one of test=, subclaims= or kind=")
        if test is not None:
            rec.update(test)
        elif subclaims is not None:
            rec.update(kind="composite", subclaims=list(subclaims))
        else:
            if kind not in ("not tested", "descriptive"):
                raise ValueError(f"an undecided claim is 'not tested' or 'descriptive'; got {kind!r}")
            rec.update(kind=kind, reason=reason)
        self.claims.append(rec)

    def markdown(self, heading: str, intro: str, table: list[str], notes: Sequence[str] = ()) -> None:
        from gradlab.experiments._writeup import claims_table
        from gradlab.io import atomic_write_text, save_json_atomic

        self.claims = decide_claims(self.claims)
        assert all(c["verdict"] in VERDICTS for c in self.claims)
        runs = [r for r in self.records.values() if r.get("spec") is not None]
        train_s = sum(float(r.get("seconds") or 0.0) for r in runs)
        self.number("scale", self.scale.to_dict())
        self.number("wall_min", round(self.wall_s / 60, 1))  # this invocation's, reused runs included
        self.number("train_min", round(train_s / 60, 1))  # the runs' own, wherever and whenever they ran
        self.files.append(save_json_atomic(self.out / "numbers.json", {
            "study": self.study, "command": self.command, "numbers": self.numbers, "claims": self.claims}))

        sc, run = self.scale, self.scale.run
        encoder = "checkpoint " + Path(run.encoder).name if run.encoder_sha256 else run.encoder
        claims = ["", "Claims (Holm over this study's tests; the write-up adjusts over every claim on its page):",
                  "", claims_table({self.study: {"claims": self.claims}}, decided=True,
                                   evidence=f"{self.study}.md")] if self.claims else []
        lines = [
            f"# {heading}", "", intro, "",
            f"Scale: encoder {encoder}{', recipe ' + run.recipe if run.recipe else ''}, {run.steps} Adam steps, "
            f"batch {run.batch_size}, {run.max_sentences} training sentences, STS-B dev every {run.eval_every} steps "
            f"on {'all 1,500' if run.dev_pairs is None else run.dev_pairs} dev pairs, monitor every "
            f"{run.monitor_every} steps{', QUICK smoke mode' if sc.quick else ''}. Seeds {list(range(sc.seeds))}; "
            "mean ± sample sd.",
            "", *table, *claims, "", *notes, "" if notes else "",
            f"Command: `{self.command}`", "",
            f"Runs: {len(runs)} ({self.executed} executed by this invocation, the rest reused from "
            f"`runs/`); their training time {train_s / 60:.1f} min (sum over runs); this invocation's wall time "
            f"{self.wall_s / 60:.1f} min.", "",
        ]
        self.files.append(atomic_write_text(self.out / "results.md", "\n".join(lines)))


# --- values over seeds -----------------------------------------------------------------------
def values(runs: Sequence[dict], key: str | Callable[[dict], Any]) -> np.ndarray:
    """One value per run (position = seed); NaN for a run not done or without the value."""
    get = key if callable(key) else (lambda r: r.get(key))
    out = []
    for r in runs:
        v = get(r) if r.get("status") == "done" else None
        out.append(float(v) if isinstance(v, (int, float)) and math.isfinite(v) else np.nan)
    return np.array(out, float)


def mean_sd(v: np.ndarray) -> tuple[float, float | None]:
    v = np.asarray(v, float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return float("nan"), None
    return float(ok.mean()), (float(ok.std(ddof=1)) if ok.size > 1 else None)


def ci_half(v: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Half-width of the 95 % t interval of the mean over the finite values (NaN below 2 values)."""
    from scipy.stats import t as student

    v = np.asarray(v, float)
    n = np.isfinite(v).sum(axis=axis)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            sd = np.nanstd(v, axis=axis, ddof=1)
    q = student.ppf(0.975, np.maximum(n - 1, 1))
    half = np.where(n > 1, q * sd / np.sqrt(np.maximum(n, 1)), np.nan)
    return float(half) if np.ndim(half) == 0 else half


def fmt(v: np.ndarray, digits: int = 2) -> str:
    m, sd = mean_sd(v)
    if not math.isfinite(m):
        return "n/a"
    return f"{m:.{digits}f}" if sd is None else f"{m:.{digits}f} ± {sd:.{digits}f}"


def failures(runs: Sequence[dict]) -> str:
    bad = [r for r in runs if r.get("status") != "done"]
    if not bad:
        return ""
    return "; ".join(f"seed {r['spec']['seed']} failed: {r.get('error', '?')}" for r in bad)


def last(key: str):
    return lambda r: (r.get("monitor") or {}).get("last", {}).get(key)


def first(key: str):
    return lambda r: (r.get("monitor") or {}).get("first", {}).get(key)


def gd_run(r: dict):
    return (r.get("monitor") or {}).get("gd_mean_run")


def closed_at(r: dict, threshold: float = 0.01):
    """The first monitored state whose trained-loss mean GD is below ``threshold`` (None: never)."""
    for step, gd in (r.get("monitor") or {}).get("gd_trained") or []:
        if isinstance(gd, (int, float)) and gd < threshold:
            return step
    return None


def last_eval(r: dict):
    """The step of the run's last dev evaluation (None without evaluations)."""
    evals = r.get("evals") or []
    return evals[-1].get("step") if evals else None


RUN_KEYS = {"best_dev": "best_dev", "test": "test_after", "test_before": "test_before", "best_step": "best_step",
            "last_step": last_eval, "gd_run": gd_run, "gd_first": first("gd_mean_trained"),
            "gd_last": last("gd_mean_trained"), "closed_at": closed_at, "mu_pos_first": first("mu_pos"),
            "mu_neg_first": first("mu_neg"), "mu_pos_last": last("mu_pos"), "mu_neg_last": last("mu_neg"),
            "m_o_first": first("m_o"), "m_o_last": last("m_o"), "m_r_first": first("m_r"), "m_r_last": last("m_r"),
            "align_last": last("align"), "uniform_last": last("uniform"), "seconds": "seconds"}


def export(ctx: Context, prefix: str, runs: Sequence[dict], keys: Mapping[str, Any]) -> None:
    """Numbers ``prefix.key.mean`` / ``.sd`` / ``.seeds`` of each run statistic for the write-up."""
    for key, get in keys.items():
        v = values(runs, get)
        m, sd = mean_sd(v)
        ctx.number(f"{prefix}.{key}.mean", m)
        ctx.number(f"{prefix}.{key}.sd", sd)
        ctx.number(f"{prefix}.{key}.seeds", [None if not math.isfinite(x) else float(x) for x in v])


# --- tables and bundles ----------------------------------------------------------------------
def row_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def table_result(labels: Sequence[str], per_seed: np.ndarray, statistic: str, columns: Mapping[str, np.ndarray],
                 status: Sequence[str], run_ids: Sequence[Sequence[str]]):
    from gradlab.io import Result

    per_seed = np.asarray(per_seed, float).reshape(len(labels), -1)
    mean = np.array([mean_sd(row)[0] for row in per_seed])
    sd = np.array([np.nan if mean_sd(row)[1] is None else mean_sd(row)[1] for row in per_seed])
    n = np.isfinite(per_seed).sum(1)
    return Result(dims=("row",), coords={"row": np.arange(len(labels))}, mean=mean,
                  stderr=np.where(n > 1, sd / np.sqrt(np.maximum(n, 1)), np.nan),
                  extra={"label": np.array(labels, dtype=str), "per_seed": per_seed, "sd": sd,
                         "ci95_half": np.array([ci_half(row) for row in per_seed]),
                         "status": np.array(status, dtype=str), "run_ids": np.array(run_ids, dtype=str),
                         **{k: np.asarray(v, float) for k, v in columns.items()}},
                  meta={"statistic": statistic})


def heldout(run: dict) -> dict[str, np.ndarray] | None:
    if run.get("status") != "done":
        return None
    with np.load(Path(run["dir"]) / "heldout.npz", allow_pickle=False) as f:
        return {k: np.asarray(f[k]) for k in f.files}


def series(run: dict, key: str) -> tuple[np.ndarray, np.ndarray] | None:
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


def stacked(runs: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Steps, mean and 95 % interval half-width over seeds of a monitor series, and the (seed, step)
    values (NaN: failed or not recorded)."""
    got = [series(r, key) for r in runs]
    steps = next((g[0] for g in got if g is not None), np.zeros(0))
    table = np.full((len(runs), steps.size), np.nan)
    for i, g in enumerate(got):
        if g is not None and g[0].size == steps.size:
            table[i] = g[1]
    import warnings

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(table, 0) if table.size else np.zeros(0)
    half = ci_half(table, axis=0) if len(runs) > 1 and table.size else None
    return steps, mean, half, table


def series_result(steps, named: Mapping[str, np.ndarray], statistic: str):
    from gradlab.io import Result

    first_series, *_ = named.values()
    return Result(dims=("step",), coords={"step": np.asarray(steps, float)}, mean=np.asarray(first_series, float),
                  extra={k: np.asarray(v, float) for k, v in named.items()}, meta={"statistic": statistic})
