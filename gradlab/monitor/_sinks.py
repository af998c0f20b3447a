"""Where monitor records go: JSON Lines, CSV, TensorBoard, an experiment tracker, or any callable.

There is no default file: a monitor without a sink only returns its records.
``TensorBoardSink`` writes event files through ``tensorboardX`` (torch-free; the
``tensorboard`` extra); ``LogSink`` hands the flattened scalars to any
``log(metrics, step=...)`` (wandb, mlflow, trackio, ...) without importing it.

Append safety: each record is written as one complete line with a single ``write``
followed by ``flush`` (and ``os.fsync`` when asked). A crash can at worst leave a
truncated last line; ``read_log`` skips it, and a sink reopening the file starts
on a fresh line, so every earlier record stays readable.

NaN / infinity are written as JSON ``null`` (strict JSON) or an empty CSV cell;
``read_log`` gives ``None`` for both, which the report turns into NaN.

CSV rows hold the ``flatten``-ed record (nested keys joined with "/", lists as JSON
text). Numbers are written as Python writes them (``repr``: the shortest text that
reads back to the same float), so a CSV log is lossless; line breaks inside text
(an invalid record's reason) become spaces, so that each record stays one line.
``read_log`` reads either format back into the same records (``unflatten`` undoes
``flatten``), telling them apart by the content, not the file name (``log_format``:
a first line starting with "{" is JSON Lines, else a CSV header naming ``step``);
binary or other files raise a one-line ``ValueError`` naming the file.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["JSONLSink", "CSVSink", "TensorBoardSink", "LogSink", "scalars", "make_sink", "tracker_sink", "TRACKERS",
           "read_log", "iter_log", "log_format", "flatten", "unflatten"]


def _clean(x):
    """JSON-safe copy of a record: non-finite floats -> None, tuples -> lists."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def flatten(record: dict, prefix: str = "") -> dict:
    """Nested record -> flat ``{"gd_mean/infonce": 0.4, ...}`` (lists are kept as JSON text)."""
    flat = {}
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "/"))
        elif isinstance(v, (list, tuple)):
            flat[key] = json.dumps(_clean(list(v)))
        else:
            flat[key] = v
    return flat


def unflatten(flat: dict) -> dict:
    """The inverse of ``flatten``: ``{"gd_mean/infonce": 0.4}`` -> ``{"gd_mean": {"infonce": 0.4}}``.

    Keys split on "/" into nested dicts (in first-seen order) and string values
    holding a JSON array (``flatten``'s text for a list) become lists again, so
    ``unflatten(flatten(r)) == r`` for every monitor record. (An empty nested dict
    leaves no flat key, so it cannot come back; the monitor writes none with its
    default options.) A key that would need to be both a value and a group (only
    possible when a key itself holds "/") stays flat; nothing is overwritten.
    """
    out: dict = {}
    for key, v in flat.items():
        if isinstance(v, str) and v.startswith("[") and v.endswith("]"):
            try:
                decoded = json.loads(v)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, list):
                v = decoded
        *groups, leaf = str(key).split("/")
        node = out
        for g in groups:
            child = node.setdefault(g, {})
            if not isinstance(child, dict):
                node = None
                break
            node = child
        if node is not None and not isinstance(node.get(leaf), dict):
            node[leaf] = v
        else:  # a value/group clash (a key holding "/"): keep it as written, never overwrite
            out.setdefault(key, v)
    return out


def _ends_mid_line(path: Path) -> bool:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


class JSONLSink:
    """Append one JSON object per line to ``path`` (created with its parent directory).

    Args:
      path: the log file.
      fsync: also ``os.fsync`` after each record (survives power loss; slower).
    """

    def __init__(self, path, *, fsync: bool = False):
        self.path = Path(path)
        self.fsync = bool(fsync)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = None

    def _open(self):
        if self._file is None or self._file.closed:
            fresh_line = _ends_mid_line(self.path)
            self._file = open(self.path, "a", encoding="utf-8")
            if fresh_line:  # a previous crash left a truncated line: never glue onto it
                self._file.write("\n")
        return self._file

    def __call__(self, record: dict) -> None:
        line = json.dumps(_clean(record), allow_nan=False, separators=(",", ":")) + "\n"
        f = self._open()
        f.write(line)
        f.flush()
        if self.fsync:
            os.fsync(f.fileno())

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    def __repr__(self):
        return f"JSONLSink({str(self.path)!r})"


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _csv_cell(v):
    """A flat value as ``csv.writer`` should see it: None / NaN / ±inf -> "", one-line text."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, str):
        return _LINE_BREAK.sub(" ", v)
    return v  # numbers: csv writes str(), which for a float is its repr (lossless)


class CSVSink:
    """Append flattened records as CSV rows; the header is taken from the first record.

    Reopening an existing file keeps its header (columns missing from a record are
    left empty; keys absent from the header are dropped). Nested keys join with "/"
    (``unflatten`` undoes it); floats are written losslessly (``repr``); None and
    non-finite numbers become empty cells. ``read_log`` reads the file back.
    """

    def __init__(self, path, *, fsync: bool = False):
        self.path = Path(path)
        self.fsync = bool(fsync)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._columns = None
        self._file = None

    def _existing_header(self):
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        with open(self.path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None)

    def __call__(self, record: dict) -> None:
        flat = {k: _csv_cell(v) for k, v in flatten(record).items()}
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if self._columns is None:
            self._columns = self._existing_header()
            if self._columns is None:
                self._columns = list(flat)
                writer.writerow(self._columns)
        writer.writerow([flat.get(c, "") for c in self._columns])
        if self._file is None or self._file.closed:
            fresh_line = _ends_mid_line(self.path)
            self._file = open(self.path, "a", newline="", encoding="utf-8")
            if fresh_line:
                self._file.write("\n")
        self._file.write(buf.getvalue())
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    def __repr__(self):
        return f"CSVSink({str(self.path)!r})"


#: Record keys that are not curves: the x axis, the clock, the batch shape, the window's bookkeeping.
_NOT_SCALARS = ("step", "time", "valid", "reason", "n", "d", "rankme_rows", "rankme_step", "histograms", "losses")
_WINDOW_SCALARS = ("rankme", "alpha_req")


def scalars(record: dict, prefix: str = "") -> dict[str, float]:
    """The record's curves, flattened: ``{"mu_pos": 0.7, "gd_mean/infonce": 0.4, "hardest_share/0.05": ...}``.

    Finite numbers only (None / NaN and the histograms are left out; so are ``step``,
    ``time``, ``valid``, the batch shape ``n`` / ``d`` and the window bookkeeping
    ``rankme_rows`` / ``rankme_step``).

    Args:
      record: a ``ParadigmMonitor`` record.
      prefix: prepended to every name (e.g. ``"paradigm/"``).
    """
    out = {}
    for key, v in flatten({k: v for k, v in record.items() if k not in _NOT_SCALARS}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        out[prefix + key] = float(v)
    return out


class _NewWindow:
    """Pass RankMe / α-ReQ on only when a record brings a new window (not the same value every step).

    Returns the record's scalars (without the window's when it is not new) and the new
    window's step (``None`` if none).
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.last = None

    def __call__(self, record):
        values = scalars(record, self.prefix)
        step = record.get("rankme_step")
        if step is None or step == self.last:
            for k in _WINDOW_SCALARS:
                values.pop(self.prefix + k, None)
            return values, None
        self.last = step
        return values, step


class LogSink:
    """Hand each record's scalars to an experiment tracker's ``log(metrics, step=step)``.

    Nothing is imported: any function taking a dict of floats and a ``step`` keyword
    fits. RankMe and α-ReQ are passed when a new window arrives, at the record's step
    (trackers want increasing steps; ``rankme_step`` names the window's own step)::

        import wandb; wandb.init(project="simcse")
        monitor = ParadigmMonitor(sink=LogSink(wandb.log, prefix="paradigm/"))

        import mlflow; mlflow.start_run()
        monitor = ParadigmMonitor(sink=LogSink(mlflow.log_metrics))

        import trackio; trackio.init(project="simcse")
        monitor = ParadigmMonitor(sink=LogSink(trackio.log))

    Args:
      log: called as ``log(metrics, step=step)``.
      prefix: prepended to every metric name.
      close: called by :meth:`close` (e.g. ``wandb.finish``, ``mlflow.end_run``); None: nothing.

    Examples:
      >>> seen = []
      >>> sink = LogSink(lambda metrics, step: seen.append((step, metrics)), prefix="p/")
      >>> sink({"step": 3, "mu_pos": 0.5, "gd_mean": {"infonce": 0.25}, "rankme": None})
      >>> seen
      [(3, {'p/mu_pos': 0.5, 'p/gd_mean/infonce': 0.25})]
    """

    def __init__(self, log: Callable, *, prefix: str = "", close: Callable[[], Any] | None = None):
        if not callable(log):
            raise TypeError(f"LogSink needs a callable log(metrics, step=...); got {type(log).__name__}")
        self.log = log
        self.prefix = str(prefix)
        self._close = close
        self._window = _NewWindow(self.prefix)

    def close(self) -> None:
        """Call the ``close`` given (once); a LogSink without one owns nothing to close."""
        close, self._close = self._close, None
        if close is not None:
            close()

    def __call__(self, record: dict) -> None:
        values, window_step = self._window(record)
        if window_step is not None:
            values[self.prefix + "rankme_step"] = float(window_step)
        if values:
            self.log(values, step=record.get("step"))

    def __repr__(self):
        return f"LogSink({getattr(self.log, '__qualname__', self.log)!r})"


def _angle_histogram(counts, cos_edges):
    """Counts over cos θ bins -> (θ edges ascending, counts): the same bins in radians."""
    import numpy as np

    theta_edges = np.arccos(np.clip(np.asarray(cos_edges, dtype=float), -1.0, 1.0))[::-1]  # ascending
    return theta_edges, np.asarray(counts, dtype=float)[::-1]


class TensorBoardSink:
    """Write each record to TensorBoard event files in ``logdir`` (through ``tensorboardX``; torch-free).

    Scalars are the record's curves, flattened (``mu_pos``, ``gd_mean/infonce``,
    ``hardest_share/0.05``, ``lemma1_min_ratio/0.1/q50``, ...; see ``scalars``), at the
    record's step and wall-clock time. RankMe and α-ReQ are written once per window,
    at ``rankme_step`` (the step that completed it). With ``ParadigmMonitor(histograms=True)``
    the angle histograms ``theta_pos`` (θ_ii') and ``theta_neg`` (θ_ij'), in radians, and
    ``lemma1_min_ratio/λ`` are written too: the monitor's fixed bins (over cos θ,
    mapped to θ = arccos), with sum and sum of squares taken at the bin centres.

    Needs ``pip install 'gradlab[tensorboard]'`` (tensorboardX). View with
    ``tensorboard --logdir LOGDIR``.

    Args:
      logdir: the run's directory (created).
      prefix: prepended to every tag.
      histograms: write the histograms a record carries.
    """

    def __init__(self, logdir, *, prefix: str = "", histograms: bool = True):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoardSink needs tensorboardX: pip install 'gradlab[tensorboard]' "
                              "(or pip install tensorboardX)") from None
        self.logdir = Path(logdir)
        self.prefix = str(prefix)
        self.histograms = bool(histograms)
        self._writer = SummaryWriter(logdir=str(self.logdir))
        self._window = _NewWindow(self.prefix)

    def _hist(self, tag, edges, counts, step, walltime):
        """One histogram over fixed bins: ``edges`` (B + 1,) ascending, ``counts`` (B,)."""
        import numpy as np

        edges = np.asarray(edges, dtype=float)
        counts = np.asarray(counts, dtype=float)
        total = float(counts.sum())
        if not total > 0:
            return
        centres = 0.5 * (edges[:-1] + edges[1:])
        used = np.flatnonzero(counts)
        self._writer.add_histogram_raw(
            self.prefix + tag, min=float(edges[used[0]]), max=float(edges[used[-1] + 1]), num=total,
            sum=float(counts @ centres), sum_squares=float(counts @ centres**2),
            bucket_limits=edges[1:].tolist(), bucket_counts=counts.tolist(),
            global_step=step, walltime=walltime)

    def __call__(self, record: dict) -> None:
        step, walltime = record.get("step"), record.get("time")
        values, window_step = self._window(record)
        for tag, v in values.items():
            at = window_step if tag[len(self.prefix):] in _WINDOW_SCALARS else step
            self._writer.add_scalar(tag, v, global_step=at, walltime=walltime)
        hists = record.get("histograms") if self.histograms else None
        if hists:
            import numpy as np

            edges = hists.get("edges_cos")
            for name, key in (("theta_pos", "cos_pos"), ("theta_neg", "cos_neg")):
                if hists.get(key) is not None and edges is not None:
                    limits, counts = _angle_histogram(hists[key], edges)
                    self._hist(name, limits, counts, step, walltime)
            lemma_edges = hists.get("edges_lemma1")
            for lam, counts in (hists.get("lemma1_min_ratio") or {}).items():
                if counts is not None and lemma_edges is not None:
                    self._hist(f"lemma1_min_ratio/{lam}", np.asarray(lemma_edges), counts, step, walltime)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __repr__(self):
        return f"TensorBoardSink({str(self.logdir)!r})"


def make_sink(sink) -> Callable[[dict], None]:
    """A sink from a callable, ``"tb:LOGDIR"`` (TensorBoard), or a path (``.csv`` -> CSV, else JSON Lines)."""
    if callable(sink):
        return sink
    if isinstance(sink, (str, os.PathLike)):
        text = str(sink)
        if text.startswith("tb:"):
            if not text[3:]:
                raise ValueError("sink 'tb:' needs a log directory, e.g. 'tb:runs/exp1'")
            return TensorBoardSink(text[3:])
        return CSVSink(sink) if text.lower().endswith(".csv") else JSONLSink(sink)
    raise TypeError(f"sink must be a path, 'tb:LOGDIR' or a callable taking a record dict; got {type(sink).__name__}")


#: The experiment trackers ``tracker_sink`` names (besides ``tb:DIR``), each with the package it needs.
TRACKERS = {"wandb": "wandb", "mlflow": "mlflow"}


def _tracker_module(name: str):
    import importlib

    try:
        return importlib.import_module(TRACKERS[name])
    except ImportError:
        raise ImportError(f"tracker {name!r} needs the {TRACKERS[name]!r} package, which is not installed: "
                          f"pip install {TRACKERS[name]}") from None


def tracker_sink(spec: str, *, name: str | None = None, config: Mapping[str, Any] | None = None):
    """A sink for an experiment tracker named by text: ``tb:DIR`` (TensorBoard, ``TensorBoardSink``),
    ``wandb[:PROJECT]`` (``LogSink(wandb.log)`` in a new ``wandb.init`` run) or
    ``mlflow[:EXPERIMENT]`` (``LogSink(mlflow.log_metrics)`` in a new ``mlflow.start_run``).

    The sinks are this module's own; the run is opened here and finished by the sink's
    ``close()``. ``gradlab train --tracker`` sends the training log (``train/loss``,
    ``train/grad_norm``, ``train/dev_spearman``, ...) and the monitor's records through it.

    Args:
      spec: the tracker, as above (default project / experiment: ``gradlab``).
      name: the run's name in the tracker.
      config: the run's configuration (wandb's ``config``; mlflow's parameters).

    Raises:
      ValueError: an unknown tracker; ImportError: its package is missing (one line naming it).
    """
    text = str(spec).strip()
    if text.startswith("tb:"):
        return make_sink(text)
    kind, _, where = text.partition(":")
    if kind not in TRACKERS:
        raise ValueError(f"unknown tracker {spec!r}; choose tb:DIR, wandb[:PROJECT] or mlflow[:EXPERIMENT]")
    module = _tracker_module(kind)
    config = {k: v for k, v in flatten(dict(config or {})).items() if v is not None}
    if kind == "wandb":
        run = module.init(project=where or "gradlab", name=name, config=config)
        return LogSink(run.log if hasattr(run, "log") else module.log, close=module.finish)
    if where:
        module.set_experiment(where)
    module.start_run(run_name=name)
    if config:
        module.log_params({k: str(v)[:500] for k, v in config.items()})  # mlflow caps a value's length
    return LogSink(module.log_metrics, close=module.end_run)


_SNIFF_BYTES = 1 << 16
_NOT_A_LOG = "is not a monitor log (JSON Lines or CSV)"


def _not_a_log(path, why: str) -> ValueError:
    return ValueError(f"{path} {_NOT_A_LOG}: {why}")


def log_format(path) -> str | None:
    """``"jsonl"``, ``"csv"``, or ``None`` for an empty log, decided by the content, not the name.

    The first non-blank line decides: one starting with "{" is JSON Lines, anything
    else is read as a CSV header (checked by ``iter_log``). Binary data (a NUL byte or
    bytes that are not UTF-8 in the first 64 KiB) raise ``ValueError`` naming the file.
    """
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    if b"\x00" in head:
        raise _not_a_log(path, "it holds binary data")
    try:  # final=False: a multi-byte character cut by the 64 KiB window is fine
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False)
    except UnicodeDecodeError:
        raise _not_a_log(path, "it holds binary data (not UTF-8 text)") from None
    text = text.lstrip()
    if not text:
        return None
    return "jsonl" if text.startswith("{") else "csv"


def _csv_value(text: str):
    """One CSV cell back to the value the JSON Lines log holds (lists stay JSON text for ``unflatten``)."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        return text
    return v if math.isfinite(v) else None


def _csv_row(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line], strict=True), None)
    except csv.Error:
        return None


def _iter_csv(f, path) -> Iterator[dict]:
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # a histogram cell may exceed the default 128 KiB
    try:
        yield from _csv_records(f, path)
    finally:
        csv.field_size_limit(limit)


def _csv_records(f, path) -> Iterator[dict]:
    header = None
    for line in f:
        if not line.strip():
            continue
        if not line.endswith("\n"):
            break  # the last line, cut short by a crash: its last cell may be incomplete
        if header is None:
            header = _csv_row(line)
            if not header or "step" not in header:
                raise _not_a_log(path, "its first line is neither a JSON object nor a CSV header "
                                       "with a 'step' column")
            continue
        cells = _csv_row(line)
        if cells is None or len(cells) != len(header) or cells == header:
            continue  # truncated by a crash, malformed, or a repeated header
        flat = {k: (c or None) if k == "reason" else _csv_value(c) for k, c in zip(header, cells, strict=True)}
        rec = unflatten(flat)
        if "reason" in flat:
            rec["reason"] = flat["reason"]  # text, even should it read as a JSON array
        yield rec


def _iter_jsonl(f) -> Iterator[dict]:
    for line in f:
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            yield rec


def iter_log(path) -> Iterator[dict]:
    """Records of a monitor log, JSON Lines or CSV (see ``log_format``), skipping unreadable lines.

    Both formats give the same records: a CSV row is un-flattened (``unflatten``),
    its cells typed back (int, float, bool, JSON lists; the reason stays text) and an
    empty cell read as ``None``, as JSON ``null`` is; a column the header lacks is a
    missing key, as in a JSON line without it. Blank lines, lines cut short by a crash
    (a CSV row with the wrong number of cells) and undecodable bytes after the first
    64 KiB only cost their own line.

    Raises:
      ValueError: the file is binary, or neither JSON Lines nor a CSV log with a
        ``step`` column (the message names the file).
    """
    path = Path(path)
    fmt = log_format(path)
    if fmt is None:
        return
    if fmt == "csv":
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
            yield from _iter_csv(f, path)
    else:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            yield from _iter_jsonl(f)


def read_log(path) -> list[dict]:
    """All readable records of a monitor log, JSON Lines or CSV (a truncated last line is skipped)."""
    return list(iter_log(path))
