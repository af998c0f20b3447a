"""Progress of a long run where people look: a status line every so often when no terminal shows a bar.

On a terminal the CLI draws a progress bar (rich). Without one (a SLURM log, a pipe, CI) a bar
would print nothing useful, so :class:`StatusLine` prints one line at a fixed interval
(``defaults.STATUS_INTERVAL_S`` seconds, ``GRADLAB_STATUS_INTERVAL_S`` overrides it)::

    training light with infonce: step 1200/5000 (24%), loss 2.913, dev 74.12, 3.1 step/s, 20m 26s left

A run shorter than one interval prints nothing; a run that printed a line prints a last one when
it completes. ``gradlab train`` and ``gradlab experiment`` use it; any loop can::

    status = StatusLine("my loop", unit="step")
    for step in range(1, total + 1):
        ...
        status(step, total, loss=loss)
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

__all__ = ["StatusLine", "status_interval", "format_duration", "format_fields", "ENV_INTERVAL"]

#: Environment variable: seconds between status lines (default ``defaults.STATUS_INTERVAL_S``).
ENV_INTERVAL = "GRADLAB_STATUS_INTERVAL_S"


def status_interval() -> float:
    """Seconds between status lines: ``GRADLAB_STATUS_INTERVAL_S`` if set, else ``defaults.STATUS_INTERVAL_S``."""
    from gradlab import defaults

    raw = os.environ.get(ENV_INTERVAL, "").strip()
    if not raw:
        return float(defaults.STATUS_INTERVAL_S)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_INTERVAL} must be a number of seconds; got {raw!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{ENV_INTERVAL} must be >= 0 seconds; got {raw!r}")
    return value


def format_duration(seconds: float) -> str:
    """``"45s"``, ``"20m 26s"``, ``"3h 02m"``; ``"?"`` when not finite.

    Examples:
      >>> format_duration(45.2), format_duration(1226), format_duration(3 * 3600 + 125), format_duration(float("inf"))
      ('45s', '20m 26s', '3h 02m', '?')
    """
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def format_fields(fields: Mapping[str, Any]) -> str:
    """``{"loss": 2.91342, "dev": 74.1234}`` -> ``"loss 2.913, dev 74.12"`` (4 significant digits;
    ``None`` values left out).

    Examples:
      >>> format_fields({"loss": 2.91342, "dev": 74.1234, "test": None})
      'loss 2.913, dev 74.12'
    """
    parts = []
    for key, value in fields.items():
        if value is None:
            continue
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{key} {text}")
    return ", ".join(parts)


class StatusLine:
    """A ``callable(done, total, **fields)`` that prints a status line at most every ``interval`` seconds.

    Each line holds the label, ``done/total`` (with ``unit``) and the percentage, the fields
    (``format_fields``), the rate since the first call and the time left at that rate. The
    first call sets the origin (a resumed run's rate counts only its own steps); nothing is
    printed before one interval has passed, and the completion (``done >= total``) is printed
    only by a run that printed before.

    Args:
      label: what runs (``"training light with infonce"``).
      unit: the unit of ``done`` (``"step"``: ``"step 120/1000"``, ``"120 step/s"``).
      interval: seconds between lines (default :func:`status_interval`).
      stream: where lines go (default ``sys.stderr``, read at each line).
      clock: seconds, monotonic (tests pass a fake one).

    Examples:
      >>> import io
      >>> now = [0.0]
      >>> out = io.StringIO()
      >>> status = StatusLine("training", unit="step", interval=60, stream=out, clock=lambda: now[0])
      >>> for step in range(1, 101):
      ...     now[0] = step * 1.5          # 1.5 s per step
      ...     status(step, 100, loss=1.0 / step)
      >>> print(out.getvalue(), end="")
      training: step 41/100 (41%), loss 0.02439, 0.667 step/s, 1m 28s left
      training: step 81/100 (81%), loss 0.01235, 0.667 step/s, 28s left
      training: step 100/100 (100%), loss 0.01, 0.667 step/s, done in 2m 28s
    """

    def __init__(self, label: str, *, unit: str = "", interval: float | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.unit = str(label), str(unit)
        self.interval = status_interval() if interval is None else float(interval)
        self.stream, self.clock = stream, clock
        self.origin: tuple[float, float] | None = None
        self.last_line: float | None = None
        self.lines = 0

    def line(self, done: float, total: float | None, fields: Mapping[str, Any], now: float) -> str:
        """The status text for ``done`` of ``total`` at time ``now`` (no printing)."""
        t0, done0 = self.origin if self.origin is not None else (now, done)
        elapsed = now - t0
        rate = (done - done0) / elapsed if elapsed > 0 else float("nan")
        unit = f"{self.unit} " if self.unit else ""
        parts = [f"{unit}{done:g}" + (f"/{total:g} ({100 * done / total:.0f}%)" if total else "")]
        if fields:
            parts.append(format_fields(fields))
        if math.isfinite(rate) and rate > 0:
            parts.append(f"{rate:.3g} {self.unit or 'it'}/s")
        if total and done >= total:
            parts.append(f"done in {format_duration(elapsed)}")
        elif total and math.isfinite(rate) and rate > 0:
            parts.append(f"{format_duration((total - done) / rate)} left")
        return f"{self.label}: " + ", ".join(p for p in parts if p)

    def __call__(self, done: float, total: float | None = None, **fields: Any) -> None:
        now = self.clock()
        if self.origin is None:
            self.origin, self.last_line = (now, done), now
            return
        finished = bool(total) and done >= total
        if finished and not self.lines:
            return
        if not finished and now - self.last_line < self.interval:
            return
        stream = self.stream if self.stream is not None else sys.stderr
        print(self.line(done, total, fields, now), file=stream, flush=True)
        self.last_line, self.lines = now, self.lines + 1
        if finished:
            self.lines = 0  # a completion is printed once
            self.last_line = float("inf")
