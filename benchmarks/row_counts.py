"""A run's steps packed in its row counts, against every step in one shape (a CPU, BERT-base).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/row_counts.py                      # 40 steps, 2 rounds
    PYTHONPATH=$PWD .venv/bin/python benchmarks/row_counts.py --steps 60 --rounds 1 \\
        --json benchmarks/results/row_counts_cpu.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/row_counts.py --plan-only --json benchmarks/results/row_counts_plan.json

``gradlab.real.batches.Batches`` packs each step's batch in the fewest of the run's row counts
that hold it, a count compiled only where the FLOPs it saves over the run exceed a
compilation's (``COMPILE_FLOPS``). This runs SimCSE's unsupervised recipe step (Gao et al.
2021: the MLP over [CLS], 32-token sentences, both dropout views in one forward, AdamW
3e-5) on a BERT-base-shaped checkpoint with random weights (``real.py``'s) over ``--steps``
batches of 32 news sentences drawn as ``gradlab train`` draws them, in two ways, each in a
fresh process, alternating round by round:

* ``row counts``: ``Batches`` as the training loop builds it;
* ``one shape``: the same batches, every one in the run's most rows (``compile_flops=inf``).

It records every step's seconds, compilations included (what a user waits for), the row
counts, and the FLOPs of the steps against the one-shape run's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 32
VARIANTS = {"row counts": None, "one shape": float("inf")}


def run_flops(encoder, batches, steps: int) -> float:
    """The matrix-product FLOPs of steps 1..``steps`` in the rows ``batches`` gives each."""
    from gradlab.real.flops import transformer_step_flops

    return sum(transformer_step_flops(encoder.train_view.config, batches.rows_of(s), batches.width,
                                      batches.batch_size, pooler=False, packed=True) for s in range(1, steps + 1))


def worker(folder: str, steps: int, compile_flops: float | None) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    sys.path.insert(0, HERE)
    import real

    from gradlab.losses import get_loss
    from gradlab.real import simcse_unsup_encoder
    from gradlab.real.batches import Batches
    from gradlab.real.step import make_train_step

    sentences, order = real.news_batches(steps, batch=BATCH)
    encoder = simcse_unsup_encoder(folder, seed=0)
    optimizer = optax.adamw(3e-5, weight_decay=0.0)
    batches = Batches(encoder, encoder.token_ids(sentences), np.asarray(order), fixed=False, n_devices=1,
                      compile_flops=compile_flops)
    step = make_train_step(encoder, get_loss("infonce", tau=0.05), optimizer, packed=True)
    params = jax.tree_util.tree_map(jnp.copy, encoder.params)
    opt_state = optimizer.init(params)
    times, rows, losses = [], [], []
    for s in range(1, steps + 1):
        t0 = time.perf_counter()
        params, opt_state, aux = step(params, opt_state, None, batches(s), jax.random.key(s))
        losses.append(float(aux["loss"]))
        times.append(time.perf_counter() - t0)
        rows.append(batches.rows_of(s))
    return {"times": times, "rows": rows, "row_counts": list(batches.row_counts), "width": batches.width,
            "flops": run_flops(encoder, batches, steps), "losses": losses}


def planned(folder: str, steps_list=(20, 60, 100, 1000), batches_list=(32, 64)) -> list[dict]:
    """The row counts ``Batches`` picks on a CPU for runs of news batches, and their FLOPs against
    one shape (no step is run)."""
    import numpy as np

    sys.path.insert(0, HERE)
    import real

    from gradlab.real import simcse_unsup_encoder
    from gradlab.real.batches import COMPILE_FLOPS, Batches

    encoder = simcse_unsup_encoder(folder, seed=0)
    out = []
    for batch in batches_list:
        for steps in steps_list:
            sentences, order = real.news_batches(steps, batch=batch)
            token_ids = encoder.token_ids(sentences)
            shapes = [Batches(encoder, token_ids, np.asarray(order), fixed=False, n_devices=1, compile_flops=cost)
                      for cost in (COMPILE_FLOPS["cpu"], float("inf"))]
            out.append({"batch": batch, "steps": steps, "row_counts": list(shapes[0].row_counts),
                        "width": shapes[0].width, "one_shape": [shapes[1].rows, shapes[1].width],
                        "flops_share": run_flops(encoder, shapes[0], steps) / run_flops(encoder, shapes[1], steps)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--plan-only", action="store_true",
                    help="run no step: the row counts and FLOPs a CPU run of 20 to 1,000 steps of 32 or 64 gets")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        folder, steps, flops = args.worker
        print(json.dumps(worker(folder, int(steps), None if flops == "None" else float(flops))))
        return
    if args.steps < 2 or args.rounds < 1:
        ap.error(f"need --steps >= 2 and --rounds >= 1; got {args.steps}, {args.rounds}")
    sys.path.insert(0, HERE)
    import real

    from gradlab.real.hf import model_zip_path

    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bert-base-") as folder:
        with zipfile.ZipFile(model_zip_path()) as zf:
            real.write_bert_base(folder, json.loads(zf.read("tokenizer.json")))
        if args.plan_only:
            plans = planned(folder)
            print("| batch | steps | row counts (x width) | one shape | FLOPs against one shape |\n|---|---|---|---|---|")
            for r in plans:
                print(f"| {r['batch']} | {r['steps']:,} | {', '.join(map(str, r['row_counts']))} x {r['width']} | "
                      f"{r['one_shape'][0]} x {r['one_shape'][1]} | {r['flops_share']:.3f} |")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"plans": plans}, f, indent=1)
            return
        for rnd in range(args.rounds):
            for name, flops in VARIANTS.items():
                cmd = [sys.executable, __file__, "--worker", folder, str(args.steps), str(flops)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode:
                    sys.exit(f"{name} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
                runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"round {rnd + 1}: {name}: {sum(runs[name][-1]['times']):.1f} s", file=sys.stderr)
    base = runs["one shape"][0]
    print(f"\n{args.steps} steps of {BATCH} news sentences, BERT-base (random weights), SimCSE's recipe step; "
          f"load average {os.getloadavg()[0]:.2f} at the end\n")
    print("| | row counts (rows x width) | FLOPs against one shape | total s (each round) | median step s |")
    print("|---|---|---|---|---|")
    for name, rs in runs.items():
        totals = [sum(r["times"]) for r in rs]
        median = statistics.median(t for r in rs for t in r["times"][1:])
        print(f"| {name} | {', '.join(map(str, rs[0]['row_counts']))} x {rs[0]['width']} | "
              f"{rs[0]['flops'] / base['flops']:.3f} | {' / '.join(f'{t:.1f}' for t in totals)} | {median:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "batch": BATCH, "rounds": args.rounds,
                       "load_average_end": os.getloadavg()[0], "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
