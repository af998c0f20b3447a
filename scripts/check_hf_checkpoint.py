"""Do transformers and sentence-transformers read the model ``gradlab train`` writes?
(``OUT/model/``, HF layout, its pooling recorded.)

Run it in a separate torch venv with transformers and sentence-transformers (those of
``scripts/make_hf_fixtures.py`` or ``scripts/install_bench.sh``; torch, transformers and
sentence-transformers are never gradlab dependencies), from the repository root::

    /work/hf-venv/bin/python scripts/check_hf_checkpoint.py

For each tiny fixture checkpoint (``tests/fixtures/hf/{bert,roberta}``) it has gradlab (the
repository's ``.venv/bin/python``, or ``$GRADLAB_PYTHON``) train two SimCSE steps with a large
learning rate and write ``OUT/model/`` (the best model by dev, possibly the start) and,
from the training state, the last (trained) parameters with ``save_transformer`` as ``OUT/last/``,
plus gradlab's ``avg`` embeddings of a few sentences; then it loads both with
``transformers.AutoModel``, mean-pools the last hidden states over the attention mask, and
prints max |Δ| against gradlab's vectors (and how far training moved them, so that a
checkpoint left untrained would show). Then ``SentenceTransformer(OUT/model)``, which reads the
recorded pooling (mean here; and a second run trained with ``cls_before_pooler``, SimCSE's
evaluation pooling), must give gradlab's embeddings with no pooling named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach in the sun.", "The market fell today.",
             "Ünïcode and numbers 12345 in one sentence, with punctuation!"]

GRADLAB = r'''
import sys, numpy as np
from gradlab.real import load_encoder, save_transformer
from gradlab.real import TrainConfig
from gradlab.real.checkpoints import unflatten_params
from gradlab.real.state import state_path
from gradlab.real.trainer import train
src, out, *sentences = sys.argv[1:]
corpus = [f"sentence number {i} says something about {w}." for i, w in
          enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 3)]
enc = load_encoder(src, pooling="avg")
cfg = TrainConfig(encoder=src, steps=2, batch_size=8, lr=1e-2, eval_every=0, dev_pairs=20, eval_test=False,
                  monitor=False, save_state_every=2)
res = train(cfg, encoder=enc, sentences=corpus, out_dir=out)
# the best model (OUT/model, possibly the start) and the last, trained one (from the training state)
with np.load(state_path(out)) as z:
    last = unflatten_params({k[len("params/"):]: z[k] for k in z.files if k.startswith("params/")}, enc.params)
save_transformer(enc, out + "/last", params=last)
cls = load_encoder(src, pooling="cls_before_pooler")
res_cls = train(cfg, encoder=cls, sentences=corpus, out_dir=out + "/cls")
np.savez(out + "/gradlab_avg.npz", model=enc.encode(sentences, params=res.params),
         last=enc.encode(sentences, params=last), start=enc.encode(sentences),
         cls=cls.encode(sentences, params=res_cls.params))
'''


def transformers_avg(path: Path, sentences: list[str]) -> np.ndarray:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path).eval()
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    out = []
    with torch.no_grad():
        for s in sentences:
            ids = torch.tensor([tok.encode(s).ids])
            h = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
            out.append(h.mean(0).numpy())
    return np.stack(out)


def sentence_transformers_encode(path: Path, sentences: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu").encode(sentences, convert_to_numpy=True)


def main() -> int:
    python = os.environ.get("GRADLAB_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    worst = 0.0
    for model in ("bert", "roberta"):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([python, "-c", GRADLAB, str(ROOT / "tests/fixtures/hf" / model), tmp, *SENTENCES],
                           check=True, cwd=ROOT)
            ours = np.load(Path(tmp) / "gradlab_avg.npz")
            for name in ("model", "last"):
                theirs = transformers_avg(Path(tmp) / name, SENTENCES)
                delta = float(np.max(np.abs(theirs - ours[name])))
                moved = float(np.max(np.abs(ours[name] - ours["start"])))
                worst = max(worst, delta)
                print(f"{model} OUT/{name}: max |transformers - gradlab| = {delta:.2e} "
                      f"(training moved the vectors by {moved:.2e})")
            for name, folder in (("model", Path(tmp) / "model"), ("cls", Path(tmp) / "cls" / "model")):
                theirs = sentence_transformers_encode(folder, SENTENCES)
                delta = float(np.max(np.abs(theirs - ours[name])))
                worst = max(worst, delta)
                print(f"{model} {folder.relative_to(tmp)}: max |sentence-transformers - gradlab| = {delta:.2e}")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
