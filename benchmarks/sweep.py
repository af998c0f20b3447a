"""A τ sweep of ``gradlab train`` commands sharing one JAX cache: what each command after the first costs.

    python benchmarks/sweep.py --json benchmarks/results/sweep_cpu.json

A sweep as a user runs it: one ``gradlab train`` process per τ of TAUS (InfoNCE, the tiny BERT
test fixture, SimCSE's recipe, 3 steps of 4 sentences, the state-0 evaluation on 20 dev
pairs), one after the other, every command with the same JAX cache (``GRADLAB_CACHE_DIR``, a
fresh folder for each round). Per command: its wall seconds, and the seconds JAX logs for the
training step's compilation (``JAX_LOG_COMPILES``; a program read from the cache takes a fraction
of a second). The step takes the loss as an argument (``gradlab.real.step.make_train_step``), so
the commands after the first find it in the cache; ROUNDS rounds, each from an empty cache.
``PYTHONPATH=OTHER_CHECKOUT`` runs another version of gradlab's library the same way (the A/B).
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
TAUS = (0.05, 0.1, 0.2, 0.4)
ROUNDS = 2
STEP_COMPILED = re.compile(r"Finished XLA compilation of jit\(step\) in ([0-9.]+)")


def command(tau: float, corpus: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "gradlab_cli.app", "train", "--encoder", str(ROOT / "tests" / "fixtures" / "hf" / "bert"),
            "--recipe", "simcse-unsup", "--corpus", str(corpus), "--steps", "3", "--batch-size", "4",
            "--eval-every", "0", "--dev-pairs", "20", "--param", f"tau={tau}", "--out", str(out)]


def one_round(folder: Path, corpus: Path) -> list[dict]:
    env = {**os.environ, "GRADLAB_CACHE_DIR": str(folder / "cache"), "JAX_LOG_COMPILES": "1"}
    rows = []
    for k, tau in enumerate(TAUS):
        t0 = time.perf_counter()
        done = subprocess.run(command(tau, corpus, folder / f"run{k}"), env=env, capture_output=True, text=True,
                              cwd=folder)  # not this checkout: PYTHONPATH decides which gradlab runs
        wall = time.perf_counter() - t0
        if done.returncode:
            raise RuntimeError(f"tau={tau}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        rows.append({"tau": tau, "wall_s": round(wall, 3),
                     "step_compile_s": [float(x) for x in STEP_COMPILED.findall(done.stderr)]})
        print(f"tau {tau}: {wall:.2f} s, the step's compilation logged {rows[-1]['step_compile_s']} s",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    rounds = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory(prefix="gradlab-sweep-") as tmp:
            corpus = Path(tmp) / "corpus.txt"
            corpus.write_text("".join(f"sentence number {i} says something about {w}.\n" for i, w in
                                      enumerate(["cats", "dogs", "stocks", "rain", "music", "bread"] * 4)))
            rounds.append(one_round(Path(tmp), corpus))
    first = [r[0]["wall_s"] for r in rounds]
    later = [row["wall_s"] for r in rounds for row in r[1:]]
    out = {"taus": list(TAUS), "rounds": rounds, "first_wall_s_median": statistics.median(first),
           "later_wall_s_median": statistics.median(later),
           "library": os.environ.get("PYTHONPATH") or "this checkout", "versions": real.versions(sys.executable),
           "cpus": os.cpu_count()}
    print(f"first command {out['first_wall_s_median']:.2f} s; each later τ {out['later_wall_s_median']:.2f} s "
          f"(medians of {len(first)} and {len(later)})")
    if args.json:
        real.write_json(args.json, out)


if __name__ == "__main__":
    main()
