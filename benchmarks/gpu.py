"""The SimCSE recipe on a GPU: a BERT-base-shaped checkpoint, gradlab (JAX) beside transformers/torch.

    python benchmarks/gpu.py                              # every row
    python benchmarks/gpu.py --tokenizer tokenizer.json --train-steps 500 --json gpu.json

Everything large is made here, on the GPU machine: a BERT-base-shaped HF checkpoint with
random weights (seed 0; 12 layers, hidden 768, MiniLM's WordPiece vocabulary, which is
bert-base-uncased's; ``real.write_bert_base``) and a one-sentence-per-line corpus of STS-B
train sentences. One table, every row measured in this run, each in its own process (its
peak memory is that process's):

* matmul: an 8192³ bfloat16 product in JAX, median of 10 after a warm-up: the bf16 rate
  the chip reaches, printed beside its datasheet peak (dense bf16: 989 TFLOP/s for
  H100 SXM and H200).
* gradlab float32 / bf16: ``gradlab.real.plan`` of ``simcse_unsup_config`` (MLP over
  [CLS], 32 tokens, batch 64, τ 0.05, lr 3e-5; Gao et al. 2021), median of 20 steps
  after the compiling one; peak memory from JAX's allocator.
* torch float32 / tf32 / bf16 / bf16 padded to 32: transformers' ``BertModel`` of the same checkpoint, the same step
  (an MLP over [CLS], both dropout views in one forward as SimCSE's trainer does, InfoNCE
  τ 0.05, AdamW lr 3e-5), padded to each batch's longest sentence; bf16 is
  ``torch.autocast``; tf32 allows TF32 matrix products in float32, as XLA's default precision
  does for gradlab's float32 row on a GPU (torch's default does not); "padded to 32" gives
  every batch one shape, as gradlab's packing does; median of 20 steps after 5 warm-ups;
  ``torch.cuda.max_memory_allocated``.
  Needs torch and transformers (skipped with one line without them).
* gradlab bf16, batch 512: not the recipe's batch; how much of the chip a larger one fills.
* gradlab train bf16: ``gradlab train --recipe simcse-unsup --precision bf16 --steps N``
  end to end on the 20,000-line corpus (STS-B dev at state 0 and every 250 steps, test at
  the end, ParadigmMonitor attached, compilation included): wall seconds per step.
* ``--plan``: ``gradlab train --recipe simcse-unsup --precision bf16 --plan`` on a corpus of
  ``--corpus-lines`` lines (default 10^6, wiki1m_for_simcse.txt's length: one epoch is
  SimCSE's 15,625 steps), printed below the table.

FLOPs are the executed matrix products of a step (``gradlab.real.plan.transformer_step_flops``
on the shape each side runs: gradlab packs sentences into rows, torch pads them); the last
column is those FLOPs per second over the datasheet peak. Tokens/s counts the sentences'
own tokens (two views), the same for both sides.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BATCH, MAX_LEN, TAU, LR, TIMED = 64, 32, 0.05, 3e-5, 20
DATASHEET_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense, TFLOP/s
ENV_DIR = "GRADLAB_GPU_BENCH_DIR"


def _setup(folder: str, tokenizer: str | None, lines: int, layers: int | None = None) -> None:
    """The checkpoint and the corpora in ``folder``: 20,000 lines for the rows, ``lines`` for the plan."""
    sys.path.insert(0, str(HERE))
    import real

    from gradlab.real.data import load_stsb

    if tokenizer is None:
        import zipfile

        from gradlab.real.minilm import model_zip_path

        with zipfile.ZipFile(model_zip_path()) as zf:
            tok = json.loads(zf.read("tokenizer.json"))
    else:
        tok = json.loads(Path(tokenizer).read_text())
    ckpt = Path(folder, "bert-base")
    ckpt.mkdir(parents=True, exist_ok=True)
    real.write_bert_base(str(ckpt), tok, layers)
    p = load_stsb("train")
    sentences = list(dict.fromkeys(p.sentence1 + p.sentence2))
    for name, n in (("corpus.txt", 20_000), ("epoch.txt", lines)):
        Path(folder, name).write_text("\n".join(sentences[i % len(sentences)] for i in range(n)) + "\n")


def _paths() -> tuple[str, str]:
    folder = os.environ[ENV_DIR]
    return os.path.join(folder, "bert-base"), os.path.join(folder, "corpus.txt")


def _mean_tokens(corpus: str, ckpt: str) -> float:
    """Mean tokens per sentence after SimCSE's 32-token truncation ([CLS] and [SEP] counted)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
    lines = Path(corpus).read_text().splitlines()[: 50 * BATCH]
    return statistics.fmean(min(len(e.ids), MAX_LEN) for e in tok.encode_batch(lines))


def matmul() -> dict:
    import jax
    import jax.numpy as jnp

    n = 8192
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    f = jax.jit(jnp.matmul)
    f(a, b).block_until_ready()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        f(a, b).block_until_ready()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return {"step_s": s, "flops": 2 * n**3, "device": jax.devices()[0].device_kind}


def _gradlab(precision: str, batch: int = BATCH) -> dict:
    from gradlab.real import simcse_unsup_config
    from gradlab.real.plan import plan

    ckpt, corpus = _paths()
    cfg = simcse_unsup_config(ckpt, corpus, steps=TIMED + 1, precision=precision, eval_test=False, batch_size=batch)
    r = plan(cfg, measure_steps=TIMED + 1)
    return {"step_s": r["step_seconds"], "first_s": r["compile_seconds"], "flops": r["flops_per_step"],
            "peak_bytes": r["peak_memory_bytes"], "device": r["device"], "sentences": 2 * batch}


def gradlab_float32() -> dict:
    return _gradlab("float32")


def gradlab_bf16() -> dict:
    return _gradlab("bf16")


def gradlab_bf16_batch512() -> dict:
    """Not the recipe's batch: how much of the chip a larger batch fills."""
    return _gradlab("bf16", 512)


def _torch(bf16: bool, tf32: bool = False, pad_to_max: bool = False) -> dict:
    import torch
    import torch.nn.functional as F
    from transformers import BertModel, PreTrainedTokenizerFast

    from gradlab.real.plan import transformer_step_flops

    ckpt, corpus = _paths()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device("cuda")
    model = BertModel.from_pretrained(ckpt, add_pooling_layer=False).to(dev).train()
    mlp = torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.Tanh()).to(dev)
    opt = torch.optim.AdamW(list(model.parameters()) + list(mlp.parameters()), lr=LR)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ckpt, "tokenizer.json"), pad_token="[PAD]")
    lines = Path(corpus).read_text().splitlines()
    warm = 5
    n_batches = TIMED + warm
    padding = "max_length" if pad_to_max else True
    batches = [tok(lines[i * BATCH:(i + 1) * BATCH], padding=padding, truncation=True, max_length=MAX_LEN,
                   return_tensors="pt") for i in range(n_batches)]
    labels = torch.arange(BATCH, device=dev)

    def step(feats):
        ids = feats["input_ids"].to(dev).repeat(2, 1)  # both views in one forward
        mask = feats["attention_mask"].to(dev).repeat(2, 1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            h = mlp(model(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
            z1, z2 = F.normalize(h[:BATCH].float(), dim=-1), F.normalize(h[BATCH:].float(), dim=-1)
            loss = F.cross_entropy(z1 @ z2.T / TAU, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times = []
    for i, feats in enumerate(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        float(step(feats))
        torch.cuda.synchronize()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    flops = statistics.fmean(transformer_step_flops(model.config, BATCH, f["input_ids"].shape[1], BATCH, pooler=True)
                             for f in batches[warm:])
    return {"step_s": statistics.median(times), "times_ms": [round(1e3 * t, 1) for t in times], "flops": flops,
            "peak_bytes": torch.cuda.max_memory_allocated(),
            "device": torch.cuda.get_device_name(), "sentences": 2 * BATCH}


def torch_float32() -> dict:
    return _torch(False)


def torch_bf16() -> dict:
    return _torch(True)


def torch_tf32() -> dict:
    """float32 with TF32 matrix products, as XLA's default precision computes gradlab's float32 row."""
    return _torch(False, tf32=True)


def torch_bf16_padded32() -> dict:
    """Every batch padded to 32 tokens: one shape, as gradlab's packed rows have."""
    return _torch(True, pad_to_max=True)


def gradlab_train_bf16(steps: int) -> dict:
    """``gradlab train`` end to end, in a process of its own (the command's own start counted)."""
    ckpt, corpus = _paths()
    out = os.path.join(os.environ[ENV_DIR], "train-run")
    t0 = time.perf_counter()
    proc = _gradlab_cli("train", "--encoder", ckpt, "--recipe", "simcse-unsup", "--corpus", corpus,
                        "--steps", str(steps), "--precision", "bf16", "--no-plot", "--out", out)
    wall = time.perf_counter() - t0
    summary = json.loads(Path(out, "train.json").read_text())
    return {"wall_s": wall, "train_s": summary.get("seconds"), "steps": steps, "step_s": summary["seconds"] / steps,
            "best_dev": summary.get("best_dev_spearman"), "monitor": summary.get("monitor"),
            "sentences": 2 * BATCH, "last_line": proc.stdout.strip().splitlines()[-1]}


def gradlab_plan_epoch() -> dict:
    """``gradlab train --recipe simcse-unsup --precision bf16 --plan`` on the whole corpus (one epoch)."""
    ckpt, corpus = _paths()
    proc = _gradlab_cli("train", "--encoder", ckpt, "--recipe", "simcse-unsup", "--corpus",
                        os.path.join(os.path.dirname(corpus), "epoch.txt"), "--precision", "bf16", "--plan")
    return {"plan": proc.stdout.strip().splitlines()}


def _gradlab_cli(*args: str) -> subprocess.CompletedProcess:
    """``gradlab ARGS`` in a child process (this checkout's CLI, installed or not); its last error line raised."""
    code = "import sys; from gradlab_cli.app import main; sys.argv[0] = 'gradlab'; main()"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=_cli_env())
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return proc


def _cli_env() -> dict:
    """The environment a child needs to import ``gradlab_cli`` from this checkout, installed or not."""
    env = dict(os.environ)
    try:
        import gradlab_cli  # noqa: F401
    except ImportError:
        link_dir = Path(tempfile.mkdtemp(prefix="gradlab-cli-"))
        (link_dir / "gradlab_cli").symlink_to(ROOT / "cli")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(link_dir), str(ROOT), env.get("PYTHONPATH")]))
    return env


ROWS = {"matmul": matmul, "gradlab_float32": gradlab_float32, "gradlab_bf16": gradlab_bf16,
        "torch_float32": torch_float32, "torch_tf32": torch_tf32, "torch_bf16": torch_bf16,
        "torch_bf16_padded32": torch_bf16_padded32, "gradlab_bf16_batch512": gradlab_bf16_batch512}


def _run_worker(name: str, *args: str) -> dict:
    code = f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import gpu; print(json.dumps(gpu.{name}({', '.join(args)})))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_cli_env())
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _peak_of(device: str) -> float | None:
    return next((v for k, v in DATASHEET_BF16.items() if k in device), None)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", help="a WordPiece tokenizer.json (default: MiniLM's, from the real extra)")
    ap.add_argument("--train-steps", type=int, default=500, help="steps of the end-to-end gradlab train row (0: skip)")
    ap.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak (default: its datasheet, H100/H200/A100)")
    ap.add_argument("--json", help="write every row's numbers here")
    ap.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS), help="the rows to measure (default: all)")
    ap.add_argument("--layers", type=int, help="a checkpoint of this many layers instead of 12 (a quick trial on a CPU)")
    ap.add_argument("--corpus-lines", type=int, default=1_000_000,
                    help="lines of the corpus (default: wiki1m_for_simcse.txt's 10^6, so --plan predicts one paper epoch)")
    ap.add_argument("--plan", action="store_true", help="also print `gradlab train --plan` for one epoch of the corpus")
    args = ap.parse_args(argv)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gradlab-gpu-") as folder:
        os.environ[ENV_DIR] = folder
        t0 = time.perf_counter()
        _setup(folder, args.tokenizer, args.corpus_lines, args.layers)
        print(f"checkpoint and corpus written in {time.perf_counter() - t0:.1f} s", flush=True)
        ckpt, corpus = _paths()
        tokens_per_sentence = _mean_tokens(corpus, ckpt)
        import real  # on sys.path since _setup

        skip = real._torch_missing(("torch", "transformers"))
        for name in args.rows:
            if name.startswith("torch") and skip:
                results[name] = {"skipped": skip}
            else:
                results[name] = _run_worker(name)
            print(f"{name}: {results[name]}", flush=True)
        if args.train_steps > 0:
            results["gradlab_train_bf16"] = _run_worker("gradlab_train_bf16", str(args.train_steps))
            print(f"gradlab_train_bf16: {results['gradlab_train_bf16']}", flush=True)
        if args.plan:
            results["gradlab_plan_epoch"] = _run_worker("gradlab_plan_epoch")
    device = next((r["device"] for r in results.values() if "device" in r), "")
    peak = args.peak_tflops * 1e12 if args.peak_tflops else _peak_of(device)
    print(f"\n{device}; datasheet dense bf16 peak: {peak / 1e12:.0f} TFLOP/s" if peak else f"\n{device}")
    print(f"{'row':<22}{'ms/step':>9}{'tokens/s':>11}{'TFLOP/s':>9}{'peak GiB':>10}{'of peak':>9}")
    for name, r in results.items():
        if "plan" in r:
            continue
        if "step_s" not in r:
            print(f"{name:<22}{'':>9} {r.get('skipped') or r.get('error')}")
            continue
        rate = r.get("flops", 0) / r["step_s"] if "flops" in r else None
        tokens = f"{r['sentences'] * tokens_per_sentence / r['step_s']:,.0f}" if "sentences" in r else ""
        mem = f"{r['peak_bytes'] / 2**30:.2f}" if "peak_bytes" in r else ""
        print(f"{name:<22}{1e3 * r['step_s']:>9.1f}{tokens:>11}{(rate or 0) / 1e12:>9.1f}{mem:>10}"
              f"{(f'{rate / peak:.1%}' if rate and peak else ''):>9}")
    if "plan" in results.get("gradlab_plan_epoch", {}):
        print("\ngradlab train --recipe simcse-unsup --precision bf16 --plan, one epoch of the corpus:")
        print("\n".join(results["gradlab_plan_epoch"]["plan"]))
    if args.json:
        Path(args.json).write_text(json.dumps({"peak_flops": peak, "tokens_per_sentence": tokens_per_sentence,
                                               "rows": results}, indent=1))


if __name__ == "__main__":
    main()
