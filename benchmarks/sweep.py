"""Sweeps of training runs: what each run after the first costs, command by command and in one process.

    python benchmarks/sweep.py --json benchmarks/results/sweep_cpu.json
    python benchmarks/sweep.py --in-process --baseline OTHER_CHECKOUT --json benchmarks/results/sweep_in_process_cpu.json

Sweeps as a user runs them: one run per value of SWEEPS (τ, then the learning rate; InfoNCE, the
tiny BERT test fixture, SimCSE's recipe, 3 steps of 4 sentences, the state-0 evaluation on 20
dev pairs), one after the other, ROUNDS rounds.

By default, one ``gradlab train`` process per value, every command of a sweep with the same JAX
cache (``GRADLAB_CACHE_DIR``, a fresh folder for each round). Per command: its wall seconds, and
the seconds JAX logs for the training step's compilation (``JAX_LOG_COMPILES``; a program read
from the cache takes a fraction of a second). The step takes the loss as an argument
(``gradlab.real.step.make_train_step``) and the learning rate as a value of the optimizer's state
(``gradlab.real.loop.make_optimizer``), so the commands after the first find it in the cache.
``PYTHONPATH=OTHER_CHECKOUT`` runs another version of gradlab's library the same way (the A/B).

With ``--in-process``, each round is one fresh Python process that runs the sweep's values
through ``gradlab.real.train``, as a notebook does, without the persistent cache: per run its wall
seconds and the seconds of every XLA compilation (``jax.monitoring``). The runs of one process
share their step's and their monitor's programs, so a later run compiles nothing. ``--baseline``
runs another checkout's library the same way, its rounds alternating with this one's.
"""

from __future__ import annotations

import argparse
import json
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


#: Every run's settings but the swept one (``gradlab train``'s options, ``train_config``'s fields).
RUN = {"encoder": str(ROOT / "tests" / "fixtures" / "hf" / "bert"), "recipe": "simcse-unsup", "steps": 3,
       "batch_size": 4, "eval_every": 0, "dev_pairs": 20}


def command(option: list[str], corpus: Path, out: Path) -> list[str]:
    settings = [a for k, v in RUN.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    return [sys.executable, "-m", "gradlab_cli.app", "train", *settings, "--corpus", str(corpus), *option,
            "--out", str(out)]


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


def write_corpus(folder: Path) -> Path:
    corpus = folder / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} says something about {w}.\n" for i, w in
                              enumerate(["cats", "dogs", "stocks", "rain", "music", "bread"] * 4)))
    return corpus


def in_process_sweep(name: str, folder: Path) -> list[dict]:
    """Every value of SWEEPS[name] trained in this process through ``gradlab.real.train`` (the
    library of ``sys.path``), without the persistent cache: per run, its wall seconds and the
    seconds of XLA's compilations during it."""
    from jax import monitoring

    from gradlab.real import train, train_config

    compiles: list[float] = []
    monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(seconds) if event == "/jax/core/compile/backend_compile_duration"
        else None)
    corpus = write_corpus(folder)
    (flag, _), values = SWEEPS[name]
    rows = []
    for k, value in enumerate(values):
        option = {"loss_params": {"tau": value}} if flag == "--param" else {"lr": value}
        config = train_config(**RUN, corpus=str(corpus), **option)
        del compiles[:]
        t0 = time.perf_counter()
        result = train(config, out_dir=folder / f"run{k}")
        wall = time.perf_counter() - t0
        if result.monitor != "attached":
            raise RuntimeError(f"{name}={value}: the monitor is {result.monitor}")
        rows.append({name: value, "wall_s": round(wall, 3), "compilations": len(compiles),
                     "compile_s": round(sum(compiles), 3)})
    return rows


def run_in_process(name: str, library: str | None) -> list[dict]:
    """:func:`in_process_sweep` in a fresh process, with ``library`` (a checkout) first on its path."""
    env = {**os.environ, "GRADLAB_CACHE_DIR": "off"}
    env.pop("JAX_LOG_COMPILES", None)
    if library is not None:
        env["PYTHONPATH"] = library
    with tempfile.TemporaryDirectory(prefix="gradlab-sweep-") as tmp:
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import json, sweep; "
                f"from pathlib import Path; print('ROWS', json.dumps(sweep.in_process_sweep({name!r}, Path({tmp!r}))))")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp)
    if done.returncode:
        raise RuntimeError(f"{name} ({library or 'this checkout'}): exit {done.returncode}: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.split("ROWS ", 1)[1])


def in_process_main(args) -> None:
    libraries = {"this checkout": str(ROOT), **({"baseline": str(Path(args.baseline).resolve())} if args.baseline
                                                 else {})}
    out = {"mode": "in process, no persistent cache", "libraries": libraries,
           "versions": real.versions(sys.executable), "cpus": os.cpu_count(), "sweeps": {}}
    for name in args.sweeps:
        rounds: dict[str, list] = {label: [] for label in libraries}
        for _ in range(ROUNDS):
            for label, library in libraries.items():  # alternating, round by round
                rounds[label].append(run_in_process(name, library))
                later = [row["wall_s"] for row in rounds[label][-1][1:]]
                print(f"{name}, {label}: first run {rounds[label][-1][0]['wall_s']:.2f} s, the later ones {later} s",
                      flush=True)
        out["sweeps"][name] = {"values": list(SWEEPS[name][1]), "rounds": rounds, **{
            label: {"first_wall_s_median": statistics.median(r[0]["wall_s"] for r in rows),
                    "later_wall_s_median": statistics.median(row["wall_s"] for r in rows for row in r[1:]),
                    "later_compilations_median": statistics.median(row["compilations"] for r in rows
                                                                    for row in r[1:])}
            for label, rows in rounds.items()}}
        for label in libraries:
            summary = out["sweeps"][name][label]
            print(f"{name}, {label}: first run {summary['first_wall_s_median']:.2f} s; each later value "
                  f"{summary['later_wall_s_median']:.2f} s, {summary['later_compilations_median']:g} compilations")
    if args.json:
        real.write_json(args.json, out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--sweeps", nargs="+", choices=list(SWEEPS), default=list(SWEEPS), help="the sweeps to run")
    ap.add_argument("--in-process", action="store_true", help="each round one process of library calls (no cache)")
    ap.add_argument("--baseline", help="with --in-process: another checkout, run the same way")
    args = ap.parse_args(argv)
    if args.in_process:
        return in_process_main(args)
    if args.baseline:
        ap.error("--baseline goes with --in-process (the commands take PYTHONPATH=OTHER_CHECKOUT)")
    out = {"library": os.environ.get("PYTHONPATH") or "this checkout", "versions": real.versions(sys.executable),
           "cpus": os.cpu_count(), "sweeps": {}}
    for name in args.sweeps:
        rounds = []
        for _ in range(ROUNDS):
            with tempfile.TemporaryDirectory(prefix="gradlab-sweep-") as tmp:
                rounds.append(one_round(name, Path(tmp), write_corpus(Path(tmp))))
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
