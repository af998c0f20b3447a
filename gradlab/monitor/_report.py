"""A monitor log read back as the data of its report (Li et al. 2024 Sec. 3.2 over training steps).

``report_data`` reads a log (JSON Lines or CSV: ``read_log`` gives the same records from both)
and computes everything its report holds, drawing nothing: the series over the steps
(``log_series``), the first and last monitored records, the arrays of ``<prefix>.npz`` and the
counts of ``<prefix>.json``. ``gradlab.figures.report`` draws them with ``gradlab.plot``'s
monitor recipes and writes the files (``gradlab report LOG``).

Arrays: ``step`` and every numeric series under its flattened record name (``"gd_mean/infonce"``,
``"hardest_share/0.05"``, ...), NaN where a value was missing; with histograms, the cosine
counts of the first and last records (``"histograms/cos_pos/first"``, ...) and their bin edges.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradlab.io import series_keys
from gradlab.monitor._sinks import flatten, log_format, read_log

__all__ = ["ReportData", "report_data", "log_series"]

_SKIP = {"time", "valid", "reason", "n", "d", "update_s"}


def log_series(records: list[dict]) -> dict[str, np.ndarray]:
    """Valid records -> ``{"step": (T,), "<flat name>": (T,)}`` (NaN where missing)."""
    valid = [r for r in records if r.get("valid")]
    flats = []
    for r in valid:
        r = {k: v for k, v in r.items() if k != "histograms" and k not in _SKIP}
        flats.append(flatten(r))
    names = []
    for f in flats:
        for k, v in f.items():
            if k not in names and (v is None or isinstance(v, (int, float))) and not isinstance(v, bool):
                names.append(k)
    out = {}
    for k in names:
        out[k] = np.array([np.nan if f.get(k) is None else float(f[k]) for f in flats], dtype=np.float64)
    return out


@dataclass(frozen=True)
class ReportData:
    """What a monitor log's report shows and saves.

    Attributes:
      series: ``log_series`` of the valid records, in step order.
      first, last: the first and the last valid record (Fig. 8a, Fig. 5: before / after training).
      arrays: the report's ``.npz``: the series, and the first and last cosine histograms when
        the run recorded them.
      meta: the report's counts: source, log format, records, valid, invalid (and why), the steps,
        the losses, τ and λ monitored, the series names.
    """

    series: dict[str, np.ndarray]
    first: dict[str, Any]
    last: dict[str, Any]
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any]


def _histograms(first: dict, last: dict) -> dict[str, np.ndarray]:
    if not first.get("histograms"):
        return {}
    out = {}
    for tag, rec in (("first", first), ("last", last)):
        for key in ("cos_pos", "cos_neg"):
            out[f"histograms/{key}/{tag}"] = np.asarray([v or 0 for v in rec["histograms"][key]], dtype=float)
    out["histograms/edges_cos"] = np.asarray(first["histograms"]["edges_cos"], dtype=float)
    return out


def report_data(log_path) -> ReportData:
    """Read a monitor log (JSON Lines or CSV) and compute its report's data, drawing nothing.

    Raises:
      FileNotFoundError: the log does not exist.
      ValueError: the log holds no valid record, or is not a monitor log (binary, or neither
        JSON Lines nor CSV).
    """
    log_path = Path(log_path)
    if not log_path.is_file():
        raise FileNotFoundError(f"no such log file: {log_path}")
    records = read_log(log_path)
    valid = sorted((r for r in records if r.get("valid")), key=lambda r: r.get("step", 0))
    if not valid:
        raise ValueError(f"{log_path} holds no valid monitor record ({len(records)} records read)")
    series = log_series(valid)
    first, last = valid[0], valid[-1]
    reasons = Counter(r.get("reason") for r in records if not r.get("valid"))
    meta = {
        "kind": "gradlab monitor report",
        "source": str(log_path.resolve()),
        "log_format": log_format(log_path),
        "records": len(records),
        "valid": len(valid),
        "invalid": sum(reasons.values()),
        "invalid_reasons": dict(reasons),
        "steps": [first.get("step"), last.get("step")],
        "losses": series_keys(series, "gd_mean"),
        "taus": series_keys(series, "hardest_share"),
        "lambdas": sorted({k.split("/")[1] for k in series if k.startswith("lemma1_min_ratio/")}, key=float),
        "series": sorted(series),
    }
    return ReportData(series, first, last, {**series, **_histograms(first, last)}, meta)
