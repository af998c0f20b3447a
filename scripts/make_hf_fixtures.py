"""Parity fixtures for gradlab's BERT / RoBERTa loader, written by transformers itself.

Run it in a separate virtual environment OUTSIDE the repository (torch and transformers are
never gradlab dependencies)::

    python3 -m venv /work/hf-venv
    /work/hf-venv/bin/pip install torch==2.13.0 transformers tokenizers safetensors numpy
    /work/hf-venv/bin/python scripts/make_hf_fixtures.py            # from the repository root

(a CPU torch 2.13.0 wheel is in pip's find-links; pin it so that pip pulls no other torch).

From a fixed seed it builds two tiny randomly initialised models (hidden size 32,
3 layers so that avg_first_last (layers 1 and 3) and avg_top2 (layers 2 and 3) differ; every weight, LayerNorm and bias perturbed away from its default so that a misplaced one shows):

- ``tests/fixtures/hf/bert/``: a ``BertModel`` with its pooler, on the WordPiece vocabulary
  of all-MiniLM-L6-v2's ``tokenizer.json`` (read from ``all_minilm_l6_v2/model.zip``; the
  word-embedding table is stored in float16 to keep the file small, the model computes in
  float32 on exactly those values);
- ``tests/fixtures/hf/roberta/``: a ``RobertaModel`` with its pooler, on a byte-level BPE
  (vocabulary 600) trained here with ``tokenizers`` on a few hundred built-in sentences,

each saved in HF layout (``config.json``, ``model.safetensors``, ``tokenizer.json``), and
``outputs.npz`` beside it: transformers' token ids (its own tokenizer wrapper, truncation at
64 tokens) and, for every SimCSE pooling (Gao et al. 2021), the pooled vectors computed from
``output_hidden_states=True`` on the sentences in ``SENTENCES`` (long, empty-ish, non-ASCII).

Finally it runs the real all-MiniLM-L6-v2 (from the zip) through transformers and through
gradlab (the repository's ``.venv/bin/python``, or ``$GRADLAB_PYTHON``) and prints max |Δ|.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import ByteLevelBPETokenizer, Tokenizer
from tokenizers.processors import RobertaProcessing
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, RobertaConfig, RobertaModel

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "hf"
SEED = 0
MAX_LEN = 64
POOLINGS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")

SENTENCES = [
    "",
    " ",
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "Two dogs run through the snow.",
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait, crème brûlée et déjà vu.",
    "中文句子也应该能被编码。",
    "Emoji are tokens too 🙂🚀👍",
    "naïve façade — “curly quotes” and ‘apostrophes’",
    "Zürich, Köln, São Paulo, Kraków.",
    "Numbers: 3.14159, 2,718 and 1e-12.",
    "UPPER CASE AND lower case.",
    "Hello",
    "?",
    "a",
    "The stock market fell sharply on Monday after the announcement.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The committee will meet again next week to discuss the budget.",
    "It rained all day, so the match was postponed until Sunday.",
    "Ελληνικά και русский текст вместе.",
    "日本語のテキストも含めます。",
    "tab\tseparated\twords and\nnew lines",
    "repeated repeated repeated repeated words",
    "Short.",
    "A considerably longer sentence about the weather in Paris, which was sunny and warm today.",
    " ".join(["The long sentence goes on and on"] * 20),
    " ".join(f"word{i}" for i in range(120)),
    "Ünïcödé everywhere: ñ, ç, ø, å, ß, œ.",
    "end.",
]

_SUBJECTS = ["A man", "A woman", "The child", "Two dogs", "The cat", "A scientist", "The committee", "My friend"]
_VERBS = ["is playing", "was reading", "will cook", "likes", "found", "watched", "is painting", "discussed"]
_OBJECTS = ["a guitar", "the newspaper", "a large meal", "the snow", "a new species", "the budget", "a film",
            "the river", "an onion", "the old house"]


def corpus() -> list[str]:
    """A few hundred built-in sentences for the byte-level BPE."""
    base = [f"{s} {v} {o}." for s, v, o in itertools.product(_SUBJECTS, _VERBS, _OBJECTS)]
    return base[::2] + [s for s in SENTENCES if s.strip()]


def minilm_zip() -> Path:
    found = sorted(glob.glob(str(ROOT / ".venv" / "lib" / "python*" / "site-packages" / "all_minilm_l6_v2" /
                                 "model.zip")))
    if not found:
        sys.exit("all_minilm_l6_v2/model.zip not found under the repository's .venv (bash scripts/install_real.sh)")
    return Path(found[0])


def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Move every weight away from its default so that a misplaced tensor changes the outputs."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias") or "LayerNorm.bias" in name:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.2 * noise)


def pooled(out, mask: torch.Tensor) -> dict[str, np.ndarray]:
    """SimCSE's five poolings from transformers' outputs (``hidden_states[1]`` = first layer's output)."""
    hs = out.hidden_states
    m = mask.unsqueeze(-1).to(hs[-1].dtype)

    def avg(h):
        return (h * m).sum(1) / m.sum(1)

    res = {
        "cls": out.pooler_output,
        "cls_before_pooler": out.last_hidden_state[:, 0],
        "avg": avg(hs[-1]),
        "avg_first_last": avg((hs[1] + hs[-1]) / 2.0),
        "avg_top2": avg((hs[-1] + hs[-2]) / 2.0),
    }
    return {k: v.detach().numpy().astype(np.float32) for k, v in res.items()}


def run_and_save(model: torch.nn.Module, folder: Path, *, float16: tuple[str, ...] = ()) -> None:
    """Save ``model`` in HF layout (with ``float16`` tensors stored as such) and its outputs."""
    model.eval()
    model.config.save_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    for k in float16:
        state[k] = state[k].to(torch.float16)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tok.pad_token = "[PAD]" if "[PAD]" in tok.get_vocab() else "<pad>"
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
    with torch.no_grad():
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
    res = pooled(out, enc["attention_mask"])
    np.savez_compressed(folder / "outputs.npz", sentences=np.asarray(SENTENCES),
                        input_ids=enc["input_ids"].numpy().astype(np.int32),
                        attention_mask=enc["attention_mask"].numpy().astype(np.int32), **res)
    scale = max(float(np.abs(v).max()) for v in res.values())
    print(f"{folder.relative_to(ROOT)}: {len(SENTENCES)} sentences, max |x| {scale:.3g}, "
          f"longest {int(enc['attention_mask'].sum(1).max())} tokens")


def make_bert(gen: torch.Generator) -> None:
    folder = OUT / "bert"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(minilm_zip()) as zf:
        (folder / "tokenizer.json").write_bytes(zf.read("tokenizer.json"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    tok.save(str(folder / "tokenizer.json"))
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=MAX_LEN, type_vocab_size=2,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    config._attn_implementation = "eager"
    model = BertModel(config, add_pooling_layer=True)
    perturb(model, gen)
    with torch.no_grad():  # the stored float16 table, used in float32
        w = model.embeddings.word_embeddings.weight
        w.copy_(w.to(torch.float16).to(torch.float32))
    run_and_save(model, folder, float16=("embeddings.word_embeddings.weight",))


def make_roberta(gen: torch.Generator) -> None:
    folder = OUT / "roberta"
    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=600, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    bpe._tokenizer.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
    bpe.save(str(folder / "tokenizer.json"))
    config = RobertaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=32, num_hidden_layers=3,
                           num_attention_heads=4, intermediate_size=64, max_position_embeddings=MAX_LEN + 2,
                           type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    config._attn_implementation = "eager"
    model = RobertaModel(config, add_pooling_layer=True)
    perturb(model, gen)
    run_and_save(model, folder)


def check_real_minilm() -> None:
    """all-MiniLM-L6-v2 through transformers (mean pooling + L2) and through gradlab: max |Δ|."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with zipfile.ZipFile(minilm_zip()) as zf:
            for name in ("config.json", "model.safetensors", "tokenizer.json"):
                (tmp / name).write_bytes(zf.read(name))
        model = BertModel.from_pretrained(tmp, attn_implementation="eager").eval()
        tok = PreTrainedTokenizerFast(tokenizer_file=str(tmp / "tokenizer.json"), pad_token="[PAD]")
        enc = tok(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        e = torch.nn.functional.normalize(e, dim=-1).numpy()
        np.save(tmp / "want.npy", e)
        (tmp / "sentences.json").write_text(json.dumps(SENTENCES))
        python = os.environ.get("GRADLAB_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
        code = ("import json, sys, numpy as np; from gradlab.real import load_encoder; "
                "s = json.load(open(sys.argv[1])); w = np.load(sys.argv[2]); "
                "g = load_encoder('minilm').encode(s); "
                "print(f'all-MiniLM-L6-v2, transformers vs gradlab on {len(s)} sentences: '"
                "f'max |delta| {np.abs(g - w).max():.3g} (max |x| {np.abs(w).max():.3g})')")
        subprocess.run([python, "-c", code, str(tmp / "sentences.json"), str(tmp / "want.npy")], check=True)


def main() -> None:
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    make_bert(gen)
    make_roberta(gen)
    check_real_minilm()


if __name__ == "__main__":
    main()
