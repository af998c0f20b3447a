"""``report``: a monitor log turned into Li et al. 2024's Sec. 3.2 curves (figures + data + metadata).

The log may be JSON Lines or CSV (``ParadigmMonitor(sink="run.csv")``): ``read_log``
gives the same records from both, so the outputs of a run are the same either way.

Figures (drawn by ``gradlab.plot``'s monitor recipes: object API, no pyplot, no global backend change):

* ``<prefix>_curves.<fmt>``: over training steps — μ_pos / μ_neg with ±σ bands and
  σ_pos / σ_neg (Fig. 9), the GD-off fraction per loss, the hardest negative's share
  per τ (projected: solid; weight share: dashed; Fig. 7), the dynamic ratios at the
  hardest negative (Fig. 8b), the mean anchor–positive cosine (Fig. 8c), alignment /
  uniformity, m_o / m_r (Zhang et al. 2022), and the Lemma-1 minimum ratio (median, 25–75 %
  band) with the fraction satisfied by the static ratio.
* ``<prefix>_lemma1.<fmt>``: the distribution of the Lemma-1 minimum ratio per λ at
  the first and the last monitored step (Fig. 8a: before / after training) — from
  the histograms when the run recorded them, else from the recorded quantiles.
* ``<prefix>_cosines.<fmt>`` (only with histograms): cos θ_ii' and cos θ_ij' at the
  first and last step (Fig. 5).

Data: ``<prefix>.npz`` holds ``step`` and every numeric series under its flattened
record name (``"gd_mean/infonce"``, ``"hardest_share/0.05"``, ...), NaN where a value
was missing. Metadata: ``<prefix>.json`` (source, counts, invalid reasons, keys,
versions, files). Every file is written atomically.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np

from gradlab.io import load_json
from gradlab.monitor._sinks import flatten, log_format, read_log
from gradlab.plot import series_keys

__all__ = ["report", "log_series"]

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


def report(log_path, out_dir=".", *, formats=("png",), prefix: str = "monitor", plot: bool = True,
           extra_meta: dict | None = None) -> dict:
    """Plot a monitor log (JSON Lines or CSV) over training steps; write figures, data and metadata.

    Args:
      log_path: a log written by ``ParadigmMonitor``, JSON Lines or CSV, told apart by its
        content (see ``read_log``; truncated lines are skipped).
      out_dir: where to write (created if needed).
      formats: figure formats (``"png"``, ``"pdf"``, ``"svg"``).
      prefix: file-name prefix.
      plot: ``False`` writes only the data and the metadata.
      extra_meta: more metadata to record (e.g. the command line).

    Returns:
      The metadata dict (also written to ``<prefix>.json``), with ``"files"``.

    Raises:
      FileNotFoundError: the log does not exist.
      ValueError: the log holds no valid record, is not a monitor log (binary, or neither
        JSON Lines nor CSV), or a figure format is unknown.
    """
    from gradlab.outputs import check_formats

    log_path = Path(log_path)
    if not log_path.is_file():
        raise FileNotFoundError(f"no such log file: {log_path}")
    formats = check_formats((formats,) if isinstance(formats, str) else formats)
    records = read_log(log_path)
    valid = sorted((r for r in records if r.get("valid")), key=lambda r: r.get("step", 0))
    if not valid:
        raise ValueError(f"{log_path} holds no valid monitor record ({len(records)} records read)")
    series = log_series(valid)
    from gradlab.outputs import Writer

    extra = dict(extra_meta or {})
    writer = Writer(out_dir, formats=formats, plot=plot, command_line=extra.pop("command_line", None))

    data = dict(series)
    first, last = valid[0], valid[-1]
    if first.get("histograms"):
        for tag, rec in (("first", first), ("last", last)):
            for key in ("cos_pos", "cos_neg"):
                data[f"histograms/{key}/{tag}"] = np.asarray([v or 0 for v in rec["histograms"][key]], dtype=float)
        data["histograms/edges_cos"] = np.asarray(first["histograms"]["edges_cos"], dtype=float)
    if plot:
        from gradlab import plot

        figs = {"curves": plot.monitor_curves(series), "lemma1": plot.lemma1_before_after(first, last)}
        if first.get("histograms") and last.get("histograms"):
            figs["cosines"] = plot.cosine_before_after(first, last)
        for name, fig in figs.items():
            writer.figure(f"{prefix}_{name}", fig, dpi=120)

    reasons = Counter(r.get("reason") for r in records if not r.get("valid"))
    meta = {
        "kind": "gradlab monitor report",
        "source": str(log_path.resolve()),
        "log_format": log_format(log_path),
        "records": len(records),
        "valid": len(valid),
        "invalid": sum(reasons.values()),
        "invalid_reasons": dict(reasons),
        "steps": [valid[0].get("step"), valid[-1].get("step")],
        "losses": series_keys(series, "gd_mean"),
        "taus": series_keys(series, "hardest_share"),
        "lambdas": sorted({k.split("/")[1] for k in series if k.startswith("lemma1_min_ratio/")}, key=float),
        "series": sorted(series),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": [str(p) for p in writer.written] + [str(writer.out / f"{prefix}.{ext}") for ext in ("npz", "json")],
        **extra,
    }
    _, json_path = writer.data(prefix, data, extra_meta=meta)
    return load_json(json_path) if writer.primary else meta


