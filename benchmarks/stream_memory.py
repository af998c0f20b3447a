"""Peak memory of reading a training corpus: streamed (``TrainConfig(stream=True)``) vs loaded whole.

For 10^5 and 10^6 synthetic one-sentence-per-line files it runs, each in a fresh process,
every batch of one epoch through the streamed batcher (``gradlab.real.train``'s
``_StreamBatches``: the seeded shuffle buffer, then the encoder's tokenizer, then the
fixed-shape batch) and, for contrast, the default path (all lines read and tokenized up
front), and prints each process's peak RSS (``resource.getrusage``). The streamed peak
should not grow with the file; the loaded one does.

    .venv/bin/python benchmarks/stream_memory.py            # 10^5 and 10^6 lines
    .venv/bin/python benchmarks/stream_memory.py --lines 100000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r'''
import resource, sys, time
from gradlab.real import load_encoder
from gradlab.real import TrainConfig
from gradlab.real.batches import training_data
from gradlab.real.loop import make_loop
from gradlab.real.run import resolve_objective
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
enc = load_encoder("minilm")
enc.max_seq_length = 32
enc.tokenizer.enable_truncation(max_length=32)
steps = n // 64
cfg = TrainConfig(encoder="minilm", corpus=path, stream=mode == "stream", steps=steps, batch_size=64, monitor=False)
t0 = time.perf_counter()
if mode == "stream":
    loop = make_loop(cfg, enc, resolve_objective(cfg), None)
else:
    from gradlab.real.data import read_lines
    _, ids = training_data(cfg, enc, read_lines(path), None)
    loop = make_loop(cfg, enc, resolve_objective(cfg), ids)
for step in range(1, steps + 1):
    loop.batches(step)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.perf_counter() - t0)
'''

WORDS = ("the a of river market music bread train city people year government said new first "
         "time world between after water light under stone early").split()


def write_corpus(path: Path, n: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            k = int(rng.integers(4, 24))
            f.write(f"{i} " + " ".join(WORDS[j] for j in rng.integers(len(WORDS), size=k)) + ".\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--modes", nargs="+", default=["stream", "load"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lines:
            path = Path(tmp) / f"c{n}.txt"
            write_corpus(path, n)
            size = path.stat().st_size / 2**20
            for mode in args.modes:
                out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode, str(n)], check=True,
                                     capture_output=True, text=True).stdout.split()
                print(f"{n:>9,} lines ({size:6.1f} MiB)  {mode:<6}  peak RSS {float(out[0]):8.1f} MiB  "
                      f"({float(out[1]):.0f} s for {n // 64:,} batches of 64)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
