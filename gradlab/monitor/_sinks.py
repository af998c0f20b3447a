"""Where monitor records go: JSON Lines (default), CSV, or any callable; plus a tolerant reader.

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
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["JSONLSink", "CSVSink", "make_sink", "read_log", "iter_log", "log_format", "flatten",
           "unflatten"]


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


def make_sink(sink) -> Callable[[dict], None]:
    """A sink from a path (``.csv`` -> CSV, anything else -> JSON Lines) or a callable."""
    if callable(sink):
        return sink
    if isinstance(sink, (str, os.PathLike)):
        return CSVSink(sink) if str(sink).lower().endswith(".csv") else JSONLSink(sink)
    raise TypeError(f"sink must be a path or a callable taking a record dict; got {type(sink).__name__}")


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
