"""Where monitor records go: JSON Lines (default), CSV, or any callable; plus a tolerant reader.

Append safety: each record is written as one complete line with a single ``write``
followed by ``flush`` (and ``os.fsync`` when asked). A crash can at worst leave a
truncated last line; ``read_log`` skips it, and a sink reopening the file starts
on a fresh line, so every earlier record stays readable.

NaN / infinity are written as JSON ``null`` (strict JSON); ``read_log`` turns them
back into NaN where a number is expected by the report.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["JSONLSink", "CSVSink", "make_sink", "read_log", "flatten"]


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


class CSVSink:
    """Append flattened records as CSV rows; the header is taken from the first record.

    Reopening an existing file keeps its header (columns missing from a record are
    left empty; keys absent from the header are dropped). Nested keys join with "/".
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
        flat = {k: ("" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
                for k, v in flatten(record).items()}
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


def make_sink(sink) -> Callable[[dict], None]:
    """A sink from a path (``.csv`` -> CSV, anything else -> JSON Lines) or a callable."""
    if callable(sink):
        return sink
    if isinstance(sink, (str, os.PathLike)):
        return CSVSink(sink) if str(sink).lower().endswith(".csv") else JSONLSink(sink)
    raise TypeError(f"sink must be a path or a callable taking a record dict; got {type(sink).__name__}")


def iter_log(path) -> Iterator[dict]:
    """Records of a JSON Lines log, skipping blank and unreadable (truncated) lines."""
    with open(path, encoding="utf-8") as f:
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


def read_log(path) -> list[dict]:
    """All readable records of a JSON Lines log (a truncated last line is skipped)."""
    return list(iter_log(path))


