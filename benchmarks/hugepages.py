"""What transparent huge pages change for gradlab's BERT-base SimCSE step on a CPU.

    python benchmarks/hugepages.py --rounds 3 --json benchmarks/results/hugepages_cpu.json

``benchmarks/real.py``'s gradlab BERT-base recipe step (a BERT-base-shaped checkpoint of random
weights, 2 x 32 news sentences packed into rows, float32, AdamW), each measurement a fresh
process, the two settings alternating round by round so that both see the same machine load:
without, and with glibc's tunable ``glibc.malloc.hugetlb=1`` in ``GLIBC_TUNABLES`` (malloc marks
its fresh mappings, where XLA's CPU runtime puts each call's temporaries, for transparent huge
pages). Per setting: the median step, its CPU seconds (user + system, both threads), its minor
page faults, and the first call (compilation, and the first touch of the step's memory). Needs
Linux with glibc >= 2.35 and transparent huge pages in the kernel's ``madvise`` mode (otherwise
it says so and stops: ``always`` gives every mapping huge pages already, ``never`` none).
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

TUNABLE = "glibc.malloc.hugetlb=1"


def _applies() -> bool:
    """glibc >= 2.35 (the tunable) and the kernel's transparent huge pages in ``madvise`` mode."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except (AttributeError, ValueError, OSError):
        return False
    return name == "glibc" and tuple(map(int, version.split(".")[:2])) >= (2, 35) and "[madvise]" in mode


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (a fresh process per setting)")
    ap.add_argument("--json", help="also write the table and every worker's raw numbers here")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"need --rounds >= 1; got {args.rounds}")
    if not _applies():
        sys.exit("the tunable would change nothing here (not glibc >= 2.35 with transparent huge pages in madvise mode)")
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    settings = {"4 KiB pages": None, f"huge pages ({TUNABLE})": {
        "GLIBC_TUNABLES": f"{tunables}:{TUNABLE}" if tunables else TUNABLE}}
    results: dict[str, list[dict]] = {name: [] for name in settings}
    with tempfile.TemporaryDirectory(prefix="bert-base-") as folder:
        real.make_bert_base(folder)
        os.environ[real.BASE_DIR_ENV] = folder
        for rnd in range(args.rounds):
            for name, env in settings.items():
                results[name].append(real._run_worker("bertbase_step_jax", extra_env=env))
                print(f"round {rnd + 1}: {name} done", file=sys.stderr)
    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.2f} (1 min), {os.cpu_count()} CPUs\n")
    print("| setting | step s (median) | CPU s per step | page faults per step | first call s |")
    print("|---|---|---|---|---|")
    table = {}
    for name, runs in results.items():
        row = {key: statistics.median(v for r in runs for v in r[field])
               for key, field in (("step_s", "times"), ("cpu_s", "cpu_s"), ("faults", "faults"))}
        row["first_s"] = statistics.median(r["first"] for r in runs)
        table[name] = row
        print(f"| {name} | {row['step_s']:.2f} | {row['cpu_s']:.2f} | {row['faults']:,.0f} | {row['first_s']:.1f} |")
    if args.json:
        real._write_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                                     "load_average_end": load, "rounds": args.rounds,
                                     "versions": real._versions(sys.executable), "rows": table, "workers": results})


if __name__ == "__main__":
    main()
