"""Does transformers read the model ``gradlab train`` writes? (``OUT/checkpoint/``, HF layout.)

Run it in the separate torch venv of ``scripts/make_hf_fixtures.py`` (torch and transformers
are never gradlab dependencies), from the repository root::

    /work/hf-venv/bin/python scripts/check_hf_checkpoint.py

For each tiny fixture checkpoint (``tests/fixtures/hf/{bert,roberta}``) it has gradlab (the
repository's ``.venv/bin/python``, or ``$GRADLAB_PYTHON``) train two SimCSE steps with a large
learning rate and write ``OUT/checkpoint/`` (the best model by dev, possibly the start) and,
from the training state, the last (trained) parameters with ``save_transformer`` as ``OUT/last/``,
plus gradlab's ``avg`` embeddings of a few sentences; then it loads both with
``transformers.AutoModel``, mean-pools the last hidden states over the attention mask, and
prints max |Δ| against gradlab's vectors (and how far training moved them, so that a
checkpoint left untrained would show). Recorded: max |Δ| 7.2e-07 (BERT), 4.8e-07 (RoBERTa).
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
from gradlab.real.train import state_path, train, unflatten_params
src, out, *sentences = sys.argv[1:]
corpus = [f"sentence number {i} says something about {w}." for i, w in
          enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 3)]
enc = load_encoder(src, pooling="avg")
cfg = TrainConfig(encoder=src, steps=2, batch_size=8, lr=1e-2, eval_every=0, dev_pairs=20, eval_test=False,
                  monitor=False, checkpoint_every=2)
res = train(cfg, encoder=enc, sentences=corpus, out_dir=out)
# the best model (OUT/checkpoint, possibly the start) and the last, trained one (from the training state)
with np.load(state_path(out)) as z:
    last = unflatten_params({k[len("params/"):]: z[k] for k in z.files if k.startswith("params/")}, enc.params)
save_transformer(enc, out + "/last", params=last)
np.savez(out + "/gradlab_avg.npz", checkpoint=enc.encode(sentences, params=res.params),
         last=enc.encode(sentences, params=last), start=enc.encode(sentences))
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


def main() -> int:
    python = os.environ.get("GRADLAB_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    worst = 0.0
    for model in ("bert", "roberta"):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([python, "-c", GRADLAB, str(ROOT / "tests/fixtures/hf" / model), tmp, *SENTENCES],
                           check=True, cwd=ROOT)
            ours = np.load(Path(tmp) / "gradlab_avg.npz")
            for name in ("checkpoint", "last"):
                theirs = transformers_avg(Path(tmp) / name, SENTENCES)
                delta = float(np.max(np.abs(theirs - ours[name])))
                moved = float(np.max(np.abs(ours[name] - ours["start"])))
                worst = max(worst, delta)
                print(f"{model} OUT/{name}: max |transformers - gradlab| = {delta:.2e} "
                      f"(training moved the vectors by {moved:.2e})")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
