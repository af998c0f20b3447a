"""Sweeps of ``gradlab train`` commands sharing one JAX cache: what each command after the first costs.

    python benchmarks/sweep.py --json benchmarks/results/sweep_cpu.json

Sweeps as a user runs them: one ``gradlab train`` process per value of SWEEPS (τ, then the
learning rate; InfoNCE, the tiny BERT test fixture, SimCSE's recipe, 3 steps of 4 sentences,
the state-0 evaluation on 20 dev pairs), one after the other, every command of a sweep with the
same JAX cache (``GRADLAB_CACHE_DIR``, a fresh folder for each round). Per command: its wall
seconds, and the seconds JAX logs for the training step's compilation (``JAX_LOG_COMPILES``; a
program read from the cache takes a fraction of a second). The step takes the loss as an
argument (``gradlab.real.step.make_train_step``) and the learning rate as a value of the
optimizer's state (``gradlab.real.loop.make_optimizer``), so the commands after the first find
it in the cache; ROUNDS rounds, each from an empty cache. ``PYTHONPATH=OTHER_CHECKOUT`` runs
another version of gradlab's library the same way (the A/B).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real  # noqa: E402 - versions, write_json

ROOT = Path(__file__).resolve().parent.parent
#: name -> (the option, its values); the other options stay the same
SWEEPS = {"tau": (("--param", "tau={}"), (0.05, 0.1, 0.2, 0.4)), "lr": (("--lr", "{}"), (3e-5, 1e-4, 3e-4, 1e-3))}
ROUNDS = 2
STEP_COMPILED = re.compile(r"Finished XLA compilation of jit\(step\) in ([0-9.]+)")


def command(option: list[str], corpus: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "gradlab_cli.app", "train", "--encoder", str(ROOT / "tests" / "fixtures" / "hf" / "bert"),
            "--recipe", "simcse-unsup", "--corpus", str(corpus), "--steps", "3", "--batch-size", "4",
            "--eval-every", "0", "--dev-pairs", "20", *option, "--out", str(out)]


def one_round(name: str, folder: Path, corpus: Path) -> list[dict]:
    """One sweep of SWEEPS[name], its commands sharing a fresh JAX cache in ``folder``."""
    env = {**os.environ, "GRADLAB_CACHE_DIR": str(folder / "cache"), "JAX_LOG_COMPILES": "1"}
    (flag, form), values = SWEEPS[name]
    rows = []
    for k, value in enumerate(values):
        t0 = time.perf_counter()
        done = subprocess.run(command([flag, form.format(value)], corpus, folder / f"run{k}"), env=env,
                              capture_output=True, text=True,
                              cwd=folder)  # not this checkout: PYTHONPATH decides which gradlab runs
        wall = time.perf_counter() - t0
        if done.returncode:
            raise RuntimeError(f"{name}={value}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        rows.append({name: value, "wall_s": round(wall, 3),
                     "step_compile_s": [float(x) for x in STEP_COMPILED.findall(done.stderr)]})
        print(f"{name} {value}: {wall:.2f} s, the step's compilation logged {rows[-1]['step_compile_s']} s",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--sweeps", nargs="+", choices=list(SWEEPS), default=list(SWEEPS), help="the sweeps to run")
    args = ap.parse_args(argv)
    out = {"library": os.environ.get("PYTHONPATH") or "this checkout", "versions": real.versions(sys.executable),
           "cpus": os.cpu_count(), "sweeps": {}}
    for name in args.sweeps:
        rounds = []
        for _ in range(ROUNDS):
            with tempfile.TemporaryDirectory(prefix="gradlab-sweep-") as tmp:
                corpus = Path(tmp) / "corpus.txt"
                corpus.write_text("".join(f"sentence number {i} says something about {w}.\n" for i, w in
                                          enumerate(["cats", "dogs", "stocks", "rain", "music", "bread"] * 4)))
                rounds.append(one_round(name, Path(tmp), corpus))
        first = [r[0]["wall_s"] for r in rounds]
        later = [row["wall_s"] for r in rounds for row in r[1:]]
        out["sweeps"][name] = {"values": list(SWEEPS[name][1]), "rounds": rounds,
                               "first_wall_s_median": statistics.median(first),
                               "later_wall_s_median": statistics.median(later)}
        print(f"{name}: first command {statistics.median(first):.2f} s; each later value "
              f"{statistics.median(later):.2f} s (medians of {len(first)} and {len(later)})")
    if args.json:
        real.write_json(args.json, out)


if __name__ == "__main__":
    main()
