"""Several training runs side by side: their curves overlaid, their best dev and test scores tabled.

A *run* is what ``gradlab train`` writes (a folder with ``train.json``, ``train_log.jsonl``,
``paradigm_monitor.jsonl``), a committed run of ``gradlab experiment`` (``OUT/runs/<id>/``, read
through the store's ``read_record``; an experiment folder ``OUT/`` stands for all its runs), or a
bare monitor log (``.jsonl`` / ``.csv``, read by ``gradlab.monitor.read_log``). Runs whose
configurations are equal but for the seed form one *configuration*; its scores are reported as the
mean over the seeds with a Student t interval::

    mean ± t_{(1+c)/2, n-1} · s / √n        (s: the sample standard deviation, n seeds, c = 0.95)

(no interval for one seed). The curves of a configuration are the mean over its seeds at each
step, with the band of the seeds' smallest and largest values.

``gradlab compare RUN... --out DIR`` writes ``compare.{csv,md,tex}`` (the table),
``compare.png`` (the curves: loss, dev Spearman and what the monitor recorded: μ_pos, μ_neg, the
trained loss's GD and ratio R, the hardest negative's share, RankMe, the embeddings' std, m_o,
m_r, α-ReQ) and ``compare.npz`` / ``compare.json`` (the curves' numbers and provenance).

Examples:
  >>> from gradlab.compare import t_interval
  >>> mean, low, high = t_interval([71.0, 72.0, 73.0])
  >>> round(mean, 6), round(high - mean, 4)      # t_{0.975, 2} = 4.3027, s = 1, n = 3
  (72.0, 2.4841)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Run", "Comparison", "read_run", "read_runs", "compare", "t_interval", "MONITOR_PANELS"]

#: The monitor's series drawn by ``gradlab compare`` (record name, panel title), each when a run
#: recorded it. ``hardest_share`` takes τ = 0.05 (Li et al. 2024 Fig. 7), else the first τ logged.
MONITOR_PANELS = (
    ("mu_pos", "μ_pos (anchor–positive angle)"),
    ("mu_neg", "μ_neg (anchor–negative angle)"),
    ("gd_mean/trained", "GD of the trained loss"),
    ("hardest_share/0.05", "hardest negative's share (τ = 0.05)"),
    ("ratio/trained", "ratio R of the trained loss"),
    ("rankme", "RankMe"),
    ("embedding_std", "std of the normalized embeddings"),
    ("m_o", "m_o (Zhang et al. 2022)"),
    ("m_r", "m_r (Zhang et al. 2022)"),
    ("alpha_req", "α-ReQ"),
)
#: Configuration keys that are bookkeeping, not configuration (an experiment's id and hashed text).
_NOT_CONFIG = ("id", "schema_json", "seed")


@dataclasses.dataclass
class Run:
    """One run read back.

    Attributes:
      path: the folder (or log file) it was read from.
      kind: ``"train"`` (``gradlab train``), ``"experiment"`` (a run of the store) or ``"log"``.
      label: its configuration in words (the loss and its parameters).
      config: the configuration without the seed (runs equal here share a configuration);
        a bare log's is its path.
      seed: its seed (None for a bare log).
      best_dev: the best STS-B dev Spearman × 100 (None if not recorded).
      test: STS-B test Spearman × 100 with the best checkpoint (None if not scored).
      curves: ``{"loss": (steps, values), "dev": (steps, values), "<monitor series>": ...}``.
      status: ``"done"``, or ``"failed"`` / why for a run of the store that did not finish.
    """

    path: Path
    kind: str
    label: str
    config: dict[str, Any]
    seed: int | None
    best_dev: float | None
    test: float | None
    curves: dict[str, tuple[np.ndarray, np.ndarray]]
    status: str = "done"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def t_interval(values: Iterable[float], confidence: float | None = None) -> tuple[float, float | None, float | None]:
    """``(mean, low, high)``: the mean of the finite ``values`` and its Student t interval at
    ``confidence`` (default ``gradlab.defaults.CONFIDENCE``, 0.95); ``low = high = None`` for fewer
    than two values, ``mean = nan`` for none."""
    from scipy import stats

    from gradlab import defaults

    c = defaults.CONFIDENCE if confidence is None else float(confidence)
    if not 0 < c < 1:
        raise ValueError(f"confidence must lie in (0, 1); got {confidence!r}")
    v = np.asarray([x for x in values if _number(x) is not None], dtype=np.float64)
    if v.size == 0:
        return float("nan"), None, None
    mean = float(v.mean())
    if v.size < 2:
        return mean, None, None
    half = float(stats.t.ppf(0.5 + c / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return mean, mean - half, mean + half


# --------------------------------------------------------------------------- reading
def _log_curves(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The training log (``train_log.jsonl``): the loss per step and the dev Spearman per evaluation."""
    from gradlab.monitor import read_log

    if not path.is_file():
        return {}
    records = read_log(path)
    curves = {}
    for name, event, key in (("loss", "step", "loss"), ("dev", "eval", "dev_spearman")):
        points = [(r["step"], r[key]) for r in records
                  if r.get("event") == event and _number(r.get(key)) is not None and _number(r.get("step")) is not None]
        if points:
            steps, values = zip(*points, strict=True)
            curves[name] = (np.asarray(steps, float), np.asarray(values, float))
    return curves


def _monitor_curves(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every numeric series of a monitor log (``gradlab.monitor.log_series``), by its record name."""
    from gradlab.monitor import log_series, read_log

    if not path.is_file():
        return {}
    valid = sorted((r for r in read_log(path) if r.get("valid")), key=lambda r: r.get("step", 0))
    if not valid:
        return {}
    series = log_series(valid)
    steps = series.pop("step")
    return {k: (steps, v) for k, v in series.items()
            if not k.startswith("losses/") and k != "rankme_rows" and np.isfinite(v).any()}


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in sorted(params.items()))


def _train_label(cfg: Mapping[str, Any]) -> str:
    head = str(cfg.get("loss", "?")) + (f"+{cfg['transform']}" if cfg.get("transform") else "")
    params = _params_text(cfg.get("loss_params") or {})
    return f"{head}({params})" if params else head


def _read_train(d: Path) -> Run:
    from gradlab.io import load_json

    summary = load_json(d / "train.json") if (d / "train.json").is_file() else {}
    curves = {**_log_curves(d / "train_log.jsonl"), **_monitor_curves(d / "paradigm_monitor.jsonl")}
    if not summary and not curves:
        raise ValueError(f"{str(d)!r} holds neither train.json nor a readable train_log.jsonl")
    cfg = dict(summary.get("config") or {})
    best = _number(summary.get("best_dev_spearman"))
    if best is None and "dev" in curves:  # a run still in progress, or stopped: its best evaluation so far
        best = float(np.max(curves["dev"][1]))
    return Run(path=d, kind="train", label=_train_label(cfg) if cfg else d.name,
               config={k: v for k, v in cfg.items() if k not in _NOT_CONFIG} or {"run": str(d)},
               seed=cfg.get("seed"), best_dev=best, test=_number(summary.get("test_spearman_after")), curves=curves)


def _read_experiment(d: Path) -> Run:
    from gradlab.experiments import loss_label, read_record
    from gradlab.io import load_json

    cfg = load_json(d / "config.json")
    record = read_record(d.parent.parent, d.name) or {}
    status = record.get("status", "missing")
    try:
        label = loss_label(cfg["loss"])
    except (KeyError, TypeError, ValueError, OSError):
        label = json.dumps(cfg.get("loss"), sort_keys=True)
    curves = {**_log_curves(d / "train_log.jsonl"), **_monitor_curves(d / "paradigm_monitor.jsonl")}
    done = status == "done"
    return Run(path=d, kind="experiment", label=label, config={k: v for k, v in cfg.items() if k not in _NOT_CONFIG},
               seed=cfg.get("seed"), best_dev=_number(record.get("best_dev")) if done else None,
               test=_number(record.get("test_after")) if done else None, curves=curves,
               status=status if status != "failed" else f"failed: {record.get('error')}")


def read_run(path: str | Path) -> Run:
    """One run from a ``gradlab train`` folder, a run folder of ``gradlab experiment``'s store
    (``OUT/runs/<id>``) or a monitor log (``.jsonl`` / ``.csv``).

    Raises:
      FileNotFoundError: nothing at ``path``; ValueError: ``path`` is none of these (one line).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such run: {str(p)!r}")
    if p.is_file():
        curves = _monitor_curves(p)
        if not curves:
            raise ValueError(f"{str(p)!r} holds no valid monitor record")
        return Run(path=p, kind="log", label=p.parent.name + "/" + p.name if p.parent.name else p.name,
                   config={"log": str(p.resolve())}, seed=None, best_dev=None, test=None, curves=curves)
    if (p / "config.json").is_file() and not (p / "train.json").is_file():
        return _read_experiment(p)
    if (p / "train.json").is_file() or (p / "train_log.jsonl").is_file():
        return _read_train(p)
    raise ValueError(f"{str(p)!r} is not a run: expected a 'gradlab train' folder (train.json), an experiment "
                     "run (runs/<id>/config.json) or folder (runs/), or a monitor log (.jsonl / .csv)")


def read_runs(paths: Iterable[str | Path]) -> list[Run]:
    """``read_run`` of each path, an experiment folder (one holding ``runs/``) standing for every run
    committed in it (in id order); duplicates are read once."""
    from gradlab.experiments import run_status

    out, seen = [], set()
    for path in paths:
        p = Path(path)
        runs_dir = p / "runs"
        if p.is_dir() and runs_dir.is_dir() and not (p / "train.json").is_file():
            found = [d for d in sorted(runs_dir.iterdir())
                     if d.is_dir() and not d.name.startswith(".") and run_status(p, d.name) != "missing"]
            if not found:
                raise ValueError(f"experiment folder {str(p)!r} holds no committed run")
        else:
            found = [p]
        for d in found:
            key = d.resolve()
            if key not in seen:
                seen.add(key)
                out.append(read_run(d))
    if not out:
        raise ValueError("no run to compare")
    return out


# --------------------------------------------------------------------------- aggregating
def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _labels(groups: list[list[Run]]) -> list[str]:
    """Each configuration's label: its loss, plus the settings in which configurations of the same
    loss differ (``infonce, steps=200`` vs ``infonce, steps=400``)."""
    labels = []
    for runs in groups:
        same = [g for g in groups if g[0].label == runs[0].label]
        extra = []
        if len(same) > 1:
            keys = sorted({k for g in same for k in g[0].config})
            extra = [k for k in keys if len({_key({"v": g[0].config.get(k)}) for g in same}) > 1]
        text = ", ".join(f"{k}={runs[0].config.get(k)}" for k in extra)
        labels.append(f"{runs[0].label}, {text}" if text else runs[0].label)
    return labels


def _mean_curve(runs: Sequence[Run], name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, min, max) over the runs that recorded ``name``, aligned by step."""
    import warnings

    got = [r.curves[name] for r in runs if name in r.curves]
    if not got:
        return None
    steps = np.unique(np.concatenate([s for s, _ in got]))
    table = np.full((len(got), steps.size), np.nan)
    for i, (s, v) in enumerate(got):
        table[i, np.searchsorted(steps, s)] = v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step only some seeds reached
        return steps, np.nanmean(table, 0), np.nanmin(table, 0), np.nanmax(table, 0)


@dataclasses.dataclass
class Comparison:
    """Runs grouped by configuration, with their scores and curves (``compare``'s result).

    Attributes:
      runs: every run read, in the order given.
      groups: the configurations, in order of first appearance, each a list of runs (its seeds).
      labels: one label per configuration.
      confidence: the confidence level of the intervals.
    """

    runs: list[Run]
    groups: list[list[Run]]
    labels: list[str]
    confidence: float

    def rows(self) -> list[dict[str, Any]]:
        """One dict per configuration: ``label``, ``seeds``, ``n`` (runs with a best dev), ``failed``,
        and for ``best_dev`` and ``test`` the ``_mean``, ``_low`` and ``_high`` of the t interval
        (None where a configuration has fewer than two scored seeds)."""
        out = []
        for label, runs in zip(self.labels, self.groups, strict=True):
            row: dict[str, Any] = {"label": label, "seeds": [r.seed for r in runs],
                                   "n": sum(r.best_dev is not None for r in runs),
                                   "failed": sum(r.status != "done" for r in runs)}
            for key in ("best_dev", "test"):
                mean, low, high = t_interval([getattr(r, key) for r in runs], self.confidence)
                row.update({f"{key}_mean": None if math.isnan(mean) else mean, f"{key}_low": low,
                            f"{key}_high": high})
            out.append(row)
        return out

    def table(self, digits: int = 2) -> tuple[list[str], list[list[str]], tuple[list[str], list[list[Any]]]]:
        """``(header, rows, (csv_header, csv_rows))``: the table as text (``mean ± half-width``) and
        as raw values, for ``gradlab.outputs.Writer.table``."""
        pct = f"{100 * self.confidence:g} %"

        def cell(row, key):
            mean, low, high = row[f"{key}_mean"], row[f"{key}_low"], row[f"{key}_high"]
            if mean is None:
                return "n/a"
            return f"{mean:.{digits}f}" if low is None else f"{mean:.{digits}f} ± {(high - low) / 2:.{digits}f}"

        header = ["configuration", "seeds", f"best dev (mean ± {pct} CI)", f"test (mean ± {pct} CI)"]
        rows, values = [], []
        for row in self.rows():
            seeds = " ".join("-" if s is None else str(s) for s in row["seeds"])
            failed = f" ({row['failed']} not done)" if row["failed"] else ""
            rows.append([row["label"], seeds + failed, cell(row, "best_dev"), cell(row, "test")])
            values.append([row["label"], seeds, row["n"], row["failed"], *(row[f"{k}_{s}"] for k in ("best_dev", "test")
                                                                       for s in ("mean", "low", "high")),
                           self.confidence])
        csv_header = ["configuration", "seeds", "n", "not_done", "best_dev_mean", "best_dev_ci_low",
                      "best_dev_ci_high", "test_mean", "test_ci_low", "test_ci_high", "confidence"]
        return header, rows, (csv_header, values)

    def panels(self) -> list[tuple[str, list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]]]:
        """The figure's panels: ``(title, [(label, steps, mean, min, max), ...])`` for the loss, the dev
        Spearman and each of ``MONITOR_PANELS`` that some run recorded."""
        names = {k for r in self.runs for k in r.curves}
        shares = sorted((k for k in names if k.startswith("hardest_share/")), key=lambda k: float(k.split("/")[1]))
        wanted = [("loss", "training loss"), ("dev", "STS-B dev Spearman x 100")]
        for key, title in MONITOR_PANELS:
            if key == "hardest_share/0.05" and key not in names and shares:
                key, title = shares[0], f"hardest negative's share (τ = {shares[0].split('/')[1]})"
            wanted.append((key, title))
        out = []
        for key, title in wanted:
            lines = []
            for label, runs in zip(self.labels, self.groups, strict=True):
                curve = _mean_curve(runs, key)
                if curve is not None:
                    lines.append((label, *curve))
            if lines:
                out.append((title, lines))
        return out

    def arrays(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The curves as flat arrays (``group<i>/<series>/{step,mean,min,max}``) and a metadata dict
        naming each group's label and runs, for ``gradlab.outputs.Writer.data``."""
        arrays = {}
        names = sorted({k for r in self.runs for k in r.curves})
        for i, runs in enumerate(self.groups):
            for name in names:
                curve = _mean_curve(runs, name)
                if curve is not None:
                    for part, values in zip(("step", "mean", "min", "max"), curve, strict=True):
                        arrays[f"group{i}/{name}/{part}"] = values
        meta = {"confidence": self.confidence, "table": self.rows(),
                "groups": [{"label": label, "runs": [str(r.path) for r in runs], "kinds": sorted({r.kind for r in runs})}
                           for label, runs in zip(self.labels, self.groups, strict=True)]}
        return arrays, meta


def compare(paths: Iterable[str | Path], *, confidence: float | None = None) -> Comparison:
    """Read runs (``read_runs``) and group them by configuration (equal but for the seed).

    Args:
      paths: ``gradlab train`` folders, experiment runs or folders, monitor logs.
      confidence: the level of the t intervals (default ``gradlab.defaults.CONFIDENCE``).

    Returns:
      A :class:`Comparison`: ``.table()`` for the table, ``.panels()`` for
      ``gradlab.plot.compare_curves``, ``.arrays()`` for the data.
    """
    from gradlab import defaults

    c = defaults.CONFIDENCE if confidence is None else float(confidence)
    t_interval([], c)  # checks the level before anything is read
    runs = read_runs(paths)
    by_key: dict[str, list[Run]] = {}
    for run in runs:
        by_key.setdefault(_key(run.config), []).append(run)
    groups = list(by_key.values())
    return Comparison(runs=runs, groups=groups, labels=_labels(groups), confidence=c)
