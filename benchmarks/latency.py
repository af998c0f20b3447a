"""Latency benchmark: what a user waits for, whole processes, side by side in one run.

Rows, each a fresh process (median of ``--repeat`` runs, interleaved so that the machine's
load hits every row alike):
  bare JAX start     python -c "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
  heatmap cold       gradlab heatmap --loss arccon --no-plot (paper fidelity), empty cache
  heatmap warm       the same command again, cache filled by the cold run
  heatmap warm, png  gradlab heatmap --loss arccon (the figure too: what ``make run`` does), warm
  heatmap no cache   the same with --no-cache (what every run cost before the cache)
  naive vmap script  benchmarks/naive_heatmap.py: the same map written with one jax.vmap, no gradlab
  figures warm       gradlab figures (12 figures, paper fidelity), cache filled by a first run
  refuse too big     gradlab heatmap --grid 100000 --batches 100000: refused by the memory check
                     before any work (exit 2, one line)
  import ...         seconds to import gradlab, gradlab.simulate, gradlab_cli.app in a fresh process
Columns: seconds, × the bare start, target. Then where a warm run's time goes (``--breakdown``,
on by default): the phases of one warm ``heatmap`` in a fresh process, with the stored programs
(what the command does) and with tracing (the stored programs switched off, JAX's cache still on).

gradlab's modules are byte-compiled first (``compileall``; the ``__pycache__`` directories it
creates are removed at the end), as ``pip install`` does for JAX and every other installed
package: with ``PYTHONDONTWRITEBYTECODE`` set (some containers set
it) an editable checkout would otherwise recompile its sources in every process, which the
bare start, reading JAX's installed bytecode, does not pay.

    python benchmarks/latency.py                    # the table (figures included: minutes)
    python benchmarks/latency.py --skip-figures     # without the figures rows
    python benchmarks/latency.py --repeat 5
    python benchmarks/latency.py --engine           # only the engine's full-map times (e.g. on a GPU)
    python benchmarks/latency.py --repeat 5 --skip-figures --no-breakdown --json benchmarks/results/latency_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from gradlab_cli.app import main; main(sys.argv[1:])"
BARE = "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
IMPORT = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"
HEATMAP = ["heatmap", "--loss", "arccon", "--no-plot"]
NAIVE = str(ROOT / "benchmarks" / "naive_heatmap.py")
TOO_BIG = ["heatmap", "--loss", "arccon", "--grid", "100000", "--batches", "100000", "--no-plot"]
TARGETS = {"heatmap warm": "≤ 1.25×", "heatmap warm, png": "≤ 1.5×", "heatmap cold": "≤ 2×", "naive vmap script": "≥ 10 × heatmap warm",
           "figures warm": "≤ 15 s", "refuse too big": "≤ 5 s"}

# One warm heatmap's phases, timed inside a fresh process (what the command does, in order).
BREAKDOWN = """
import json, os, sys, time
t0 = time.perf_counter(); marks = {}
def mark(name):
    marks[name] = time.perf_counter() - t0 - sum(marks.values())
import typer, gradlab_cli.app
mark("CLI framework and gradlab's light imports (typer, gradlab_cli.app)")
import jax, jax.numpy as jnp
jnp.zeros(1).block_until_ready()
mark("JAX start (import, CPU client)")
import gradlab
from gradlab import design, outputs, simulate
mark("gradlab.simulate and the loss registry")
gradlab.enable_cache(os.environ["GRADLAB_CACHE_DIR"], programs=not os.environ.get("TRACE"))
loss, protocol = design.resolve_loss("arccon"), simulate.Protocol()
result = simulate.gd_map(loss, protocol)
first = time.perf_counter() - t0 - sum(marks.values())
simulate.gd_map(loss, protocol)
compute = time.perf_counter() - t0 - sum(marks.values()) - first
marks["the map: programs ready (stored: read; else traced, lowered, JAX's cache read)"] = first - compute
marks["the map: draws and compute (a second call)"] = compute
t = time.perf_counter()
outputs.Writer(sys.argv[1], plot=False, command_line="gradlab heatmap").result("heatmap_arccon_gd", result)
marks["writing the .npz and .json"] = time.perf_counter() - t
print(json.dumps(marks))
"""


def _env(cache: Path | str) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "GRADLAB_CACHE_DIR": str(cache), "MPLBACKEND": "Agg"}


def _time(args: list[str], env: dict, cwd: Path, *, code: int = 0) -> float:
    """Seconds of one process that must exit with ``code``."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != code:
        raise SystemExit(f"failed: {' '.join(args)}\n{proc.stderr[-2000:]}")
    return elapsed


def _import_time(mod: str, env: dict, cwd: Path) -> float:
    proc = subprocess.run([sys.executable, "-c", IMPORT.format(mod=mod)], env=env, cwd=cwd, capture_output=True,
                          text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def measure(repeat: int, figures: bool, work: Path) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}
    add = lambda name, value: rows.setdefault(name, []).append(value)  # noqa: E731
    out = work / "out"
    for r in range(repeat):
        cache = work / f"cache{r}"  # a fresh, empty cache for every cold run
        add("bare JAX start", _time(["-c", BARE], _env("off"), work))
        add("heatmap cold", _time(["-c", CLI, *HEATMAP, "--out", out], _env(cache), work))
        add("heatmap warm", _time(["-c", CLI, *HEATMAP, "--out", out], _env(cache), work))
        add("heatmap warm, png", _time(["-c", CLI, *HEATMAP[:-1], "--out", out], _env(cache), work))
        add("heatmap no cache", _time(["-c", CLI, "--no-cache", *HEATMAP, "--out", out], _env(cache), work))
        add("naive vmap script", _time([NAIVE, "--out", work / "naive"], _env("off"), work))
        add("refuse too big", _time(["-c", CLI, *TOO_BIG, "--out", work / "refused"], _env("off"), work, code=2))
        for mod in ("gradlab", "gradlab.simulate", "gradlab_cli.app"):
            add(f"import {mod}", _import_time(mod, _env("off"), work))
    if figures:
        cache = work / "cache-figures"
        add("figures cold", _time(["-c", CLI, "figures", "--out", work / "figs"], _env(cache), work))
        for _ in range(max(1, repeat // 2)):
            add("figures warm", _time(["-c", CLI, "figures", "--out", work / "figs"], _env(cache), work))
    return rows


def table(rows: dict[str, list[float]], load: tuple[float, float]) -> str:
    bare = statistics.median(rows["bare JAX start"])
    lines = [
        f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs",
        "",
        "| row | s (median) | × bare start | target |",
        "|-----|-----------:|-------------:|--------|",
    ]
    for name, values in rows.items():
        s = statistics.median(values)
        ratio = f"{s / bare:.2f}" if not name.startswith("import") else "—"
        lines.append(f"| {name} | {s:.2f} | {ratio} | {TARGETS.get(name, '')} |")
    if "naive vmap script" in rows:
        speedup = statistics.median(rows["naive vmap script"]) / statistics.median(rows["heatmap warm"])
        lines += ["", f"naive vmap script / heatmap warm, whole process to whole process: {speedup:.1f}×"]
    return "\n".join(lines)


def write_json(path: str, rows: dict[str, list[float]], load: tuple[float, float], repeat: int) -> None:
    """The rows (every time, the median, × the bare start, the target), the host and the versions."""
    from importlib.metadata import version

    from gpu import (  # the host's facts and the checkout's commit, as gpu.py records them
        host,
        library_commit,
    )

    import gradlab
    from gradlab.io import atomic_write_bytes

    bare = statistics.median(rows["bare JAX start"])
    data = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": "python benchmarks/latency.py " + " ".join(sys.argv[1:]),
            "repeat": repeat, "host": host(), "load_before_after": list(load), "gradlab_commit": library_commit(),
            "versions": {"jax": version("jax"), "gradlab": gradlab.__version__, "python": sys.version.split()[0]},
            "rows": {name: {"median_s": statistics.median(v), "times_s": v, "target": TARGETS.get(name),
                            "x_bare": None if name.startswith("import") else statistics.median(v) / bare}
                     for name, v in rows.items()}}
    atomic_write_bytes(path, (json.dumps(data, indent=1) + "\n").encode())


def breakdown(work: Path, repeat: int) -> str:
    """Median seconds of each phase of a warm heatmap, with the stored programs and with tracing."""
    cache = work / "cache-breakdown"
    _time(["-c", CLI, *HEATMAP, "--out", work / "bd"], _env(cache), work)  # fill the cache and the store
    phases: dict[str, dict[str, list[float]]] = {"stored": {}, "traced": {}}
    for _ in range(repeat):
        for mode in phases:
            env = {**_env(cache), **({"TRACE": "1"} if mode == "traced" else {})}
            proc = subprocess.run([sys.executable, "-c", BREAKDOWN, str(work / "bd")], env=env, cwd=work,
                                  capture_output=True, text=True, check=True)
            for name, value in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                phases[mode].setdefault(name, []).append(value)
    lines = ["| phase of a warm `gradlab heatmap --loss arccon --no-plot` | s, stored programs | s, traced |",
             "|---|---:|---:|"]
    for name in phases["stored"]:
        lines.append(f"| {name} | {statistics.median(phases['stored'][name]):.3f} | "
                     f"{statistics.median(phases['traced'][name]):.3f} |")
    return "\n".join(lines)


def engine_times(repeat: int = 20) -> str:
    """The engine alone: full paper-fidelity maps (100 × 100 × 1000 × 128) after compilation."""
    import jax

    from gradlab.simulate import Protocol, gd_map

    lines = [f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}", "",
             "| loss | mode | grid | full map, ms (median after compilation) |", "|---|---|---|---:|"]
    for loss, mode, grid in (("infonce", "common", 100), ("arccon", "common", 100), ("infonce", "independent", 100)):
        protocol = Protocol(grid=grid, mode=mode)
        gd_map(loss, protocol)  # compile
        times = []
        for _ in range(repeat if mode == "common" else max(3, repeat // 4)):
            start = time.perf_counter()
            gd_map(loss, protocol)  # returns host NumPy arrays: the time includes the transfer
            times.append(time.perf_counter() - start)
        lines.append(f"| {loss} | {mode} | {grid} × {grid} | {1e3 * statistics.median(times):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-figures", action="store_true")
    parser.add_argument("--engine", action="store_true", help="only the engine's full-map times")
    parser.add_argument("--no-breakdown", action="store_true", help="without the phases of a warm run")
    parser.add_argument("--json", help="also write the rows' times, the host and the versions here")
    args = parser.parse_args(argv)
    if args.engine:
        print(engine_times())
        return
    work = Path(tempfile.mkdtemp(prefix="gradlab-latency-"))
    import compileall

    packages = [ROOT / "gradlab", ROOT / "cli"]
    existing = {d for pkg in packages for d in pkg.rglob("__pycache__")}
    for pkg in packages:
        compileall.compile_dir(pkg, quiet=1)
    try:
        before = os.getloadavg()[0]
        rows = measure(args.repeat, not args.skip_figures, work)
        load = (before, os.getloadavg()[0])
        print(table(rows, load))
        if args.json:
            write_json(args.json, rows, load, args.repeat)
        if not args.no_breakdown:
            print()
            print(breakdown(work, args.repeat))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for d in {d for pkg in packages for d in pkg.rglob("__pycache__")} - existing:  # leave the checkout as found
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
