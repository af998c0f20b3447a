"""Record how long ``gradlab experiment all`` took, from ``/usr/bin/time -v`` and a load log, as a result file.

    (while sleep 60; do uptime; done) > load.log &
    /usr/bin/time -v gradlab experiment all --out exp/ 2> time.txt
    python examples/experiments/record_timing.py time.txt --load load.log --executed 240 --command "..."

Writes ``results/timing.json`` (the numbers the write-up quotes: ``all.wall_min``, the runs executed,
the load average while it ran) and ``results/timing.md``. Several ``time`` files (an interrupted
command resumed, or a study extended afterwards) add up: each invocation's line is kept.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from gradlab.experiments import Scale, portable_command, study_runs

HERE = Path(__file__).resolve().parent


def wall_seconds(text: str) -> float:
    """The wall-clock time of a ``/usr/bin/time -v`` report, in seconds."""
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if m is None:
        raise ValueError("no 'Elapsed (wall clock) time' line: is this /usr/bin/time -v output?")
    parts = [float(x) for x in m.group(1).split(":")]
    return sum(x * 60 ** i for i, x in enumerate(reversed(parts)))


def field(text: str, name: str) -> float | None:
    m = re.search(rf"{re.escape(name)}: ([\d.]+)", text)
    return float(m.group(1)) if m else None


def loads(text: str) -> list[float]:
    """The 1-minute load averages of ``uptime`` lines."""
    return [float(m.group(1)) for m in re.finditer(r"load average: ([\d.]+),", text)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("time", nargs="+", type=Path, help="/usr/bin/time -v reports, one per invocation")
    ap.add_argument("--load", type=Path, help="uptime lines written every minute while it ran")
    ap.add_argument("--executed", type=int, nargs="+", required=True, help="runs each invocation executed")
    ap.add_argument("--command", required=True, help="the command line timed")
    ap.add_argument("--note", action="append", default=[], help="one line on an invocation (repeatable)")
    args = ap.parse_args(argv)
    if len(args.executed) != len(args.time):
        print("record_timing.py: one --executed count per time report", file=sys.stderr)
        return 2
    reports = [p.read_text(encoding="utf-8", errors="replace") for p in args.time]
    walls = [wall_seconds(t) for t in reports]
    specs = study_runs("all", Scale.make())
    load = loads(args.load.read_text(encoding="utf-8")) if args.load else []
    numbers = {
        "all.wall_min": round(sum(walls) / 60, 1), "all.invocations_min": [round(w / 60, 1) for w in walls],
        "all.runs_executed": sum(args.executed),
        "runs": len(specs), "configurations": len({json.dumps(s.loss, sort_keys=True) for s in specs}),
        "load.min": min(load) if load else None, "load.max": max(load) if load else None,
        "load.mean": round(sum(load) / len(load), 2) if load else None, "load.samples": len(load),
    }
    command = portable_command(args.command)
    (HERE / "results" / "timing.json").write_text(json.dumps(
        {"study": "timing", "command": command, "numbers": numbers, "claims": []}, indent=2) + "\n", encoding="utf-8")
    lines = ["# How long `gradlab experiment all` took", "",
             f"Command: `{command}` (`/usr/bin/time -v`, `--jobs 2`, under `nice`), on this project's 2-core machine "
             "shared with other work.", "",
             "| invocation | wall (min) | runs executed | exit status |", "|---|---|---|---|"]
    for i, (w, n, t) in enumerate(zip(walls, args.executed, reports, strict=True), 1):
        lines.append(f"| {i} | {w / 60:.1f} | {n} | {field(t, 'Exit status'):.0f} |")
    lines += ["", *args.note]
    lines += ["", f"Total: {numbers['all.wall_min']} min for {numbers['all.runs_executed']} runs ({numbers['runs']} "
              f"runs of {numbers['configurations']} configurations in the study). 1-minute load average while it ran "
              f"({len(load)} samples): {numbers['load.min']}–{numbers['load.max']}, mean {numbers['load.mean']}.", ""]
    (HERE / "results" / "timing.md").write_text("\n".join(lines), encoding="utf-8")
    print(HERE / "results" / "timing.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
