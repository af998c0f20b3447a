"""Where a CPU step's memory comes from, and what that costs: gradlab's BERT-base SimCSE step on a CPU.

    python benchmarks/cpu_memory.py --rounds 3 --steps 6 --json benchmarks/results/cpu_memory.json
    python benchmarks/cpu_memory.py --rounds 3 --worker minilm_step_jax --json benchmarks/results/cpu_memory_minilm.json

``benchmarks/real.py``'s gradlab BERT-base recipe step (a BERT-base-shaped checkpoint of random
weights, 2 x 32 news sentences packed into rows, float32, AdamW), or its MiniLM step
(``--worker minilm_step_jax``: all-MiniLM-L6-v2, 2 x 64 news sentences), each measurement a fresh
process, the settings alternating round by round so that all see the same machine load. XLA's
CPU runtime allocates each call's temporaries afresh; glibc's malloc maps blocks that large
afresh, so the kernel zero-fills them a 4 KiB page (one fault) at a time. The settings are glibc
tunables in ``GLIBC_TUNABLES``, read when a process starts:

* glibc's defaults;
* ``reuse``: one malloc arena, no ``mmap``, no trimming (``glibc.malloc.arena_max=1``,
  ``mmap_max=0``, ``trim_threshold`` beyond any heap): a call's temporaries on the pages an
  earlier call freed, the heap kept at its largest;
* ``huge pages``: ``glibc.malloc.hugetlb=1`` (glibc >= 2.35, transparent huge pages in the
  kernel's ``madvise`` mode; elsewhere the row is skipped): malloc's fresh mappings in 2 MiB pages.

Per setting: the median step, its CPU seconds (user + system, every thread), its minor page
faults, the first call (compilation, and the first touch of the step's memory) and the peak RSS.
``gradlab train`` and ``gradlab experiment`` start with the huge pages where they apply
(``cli/_host.py``); the workers here call the library, whose processes keep glibc's defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real  # noqa: E402 - the checkpoint, the sentences and the step worker

HUGE = "glibc.malloc.hugetlb=1"
WORKERS = ("bertbase_step_jax", "minilm_step_jax")
REUSE = f"glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold={1 << 40}"


def _huge_pages_apply() -> bool:
    """glibc >= 2.35 (the tunable) and the kernel's transparent huge pages in ``madvise`` mode."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except (AttributeError, ValueError, OSError):
        return False
    return name == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35) and "[madvise]" in mode


def settings(huge: bool) -> dict[str, dict[str, str] | None]:
    """Each setting's name and the ``GLIBC_TUNABLES`` its worker gets (None: this process's environment)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")

    def env(extra: str) -> dict[str, str]:
        return {"GLIBC_TUNABLES": f"{tunables}:{extra}" if tunables else extra}

    out: dict[str, dict[str, str] | None] = {"glibc's defaults": None, "reuse": env(REUSE)}
    if huge:
        out[f"huge pages ({HUGE})"] = env(HUGE)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (a fresh process per setting)")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per process, after the compiling one")
    ap.add_argument("--no-huge-pages", action="store_true", help="skip the huge-page row")
    ap.add_argument("--worker", choices=WORKERS, default=WORKERS[0],
                    help="real.py's step: BERT-base's recipe (default; --steps timed) or MiniLM's (its own 4)")
    ap.add_argument("--json", help="also write the table and every worker's raw numbers here")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        ap.error(f"need --rounds >= 1 and --steps >= 1; got {args.rounds}, {args.steps}")
    huge = not args.no_huge_pages and _huge_pages_apply()
    if not huge and not args.no_huge_pages:
        print("(no huge-page row: not glibc >= 2.35 with transparent huge pages in madvise mode)", file=sys.stderr)
    chosen = settings(huge)
    results: dict[str, list[dict]] = {name: [] for name in chosen}
    real.BASE_STEPS_TIMED = args.steps  # the batches make_bert_base writes: one per step
    with tempfile.TemporaryDirectory(prefix="bert-base-") as folder:
        if args.worker == "bertbase_step_jax":
            real.make_bert_base(folder)
            os.environ[real.BASE_DIR_ENV] = folder
        for rnd in range(args.rounds):
            for name, env in chosen.items():
                results[name].append(real.run_worker(args.worker, extra_env=env))
                print(f"round {rnd + 1}: {name} done", file=sys.stderr)
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.2f} (1 min), {os.cpu_count()} CPUs\n")
    print("| setting | step s (median) | CPU s per step | page faults per step | first call s | peak RSS GiB |")
    print("|---|---|---|---|---|---|")
    table = {}
    for name, runs in results.items():
        row = {key: statistics.median(v for r in runs for v in r[field])
               for key, field in (("step_s", "times"), ("cpu_s", "cpu_s"), ("faults", "faults"))}
        row["first_s"] = statistics.median(r["first"] for r in runs)
        row["rss_gib"] = max(r["rss_mb"] for r in runs) / 1024
        table[name] = row
        print(f"| {name} | {row['step_s']:.2f} | {row['cpu_s']:.2f} | {row['faults']:,.0f} | {row['first_s']:.1f} "
              f"| {row['rss_gib']:.2f} |")
    if args.json:
        real.write_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                                     "worker": args.worker, "load_average_end": load, "rounds": args.rounds,
                                     "steps": args.steps if args.worker == "bertbase_step_jax" else real.STEPS_TIMED,
                                     "versions": real.versions(sys.executable), "rows": table, "workers": results})


if __name__ == "__main__":
    main()
