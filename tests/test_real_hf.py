"""BERT / RoBERTa checkpoints: parity with transformers, SimCSE's poolings, sharded weights, bf16,
the encoder interface, and one-line errors for defective checkpoints.

The witnesses are ``tests/fixtures/hf/{bert,roberta}/outputs.npz``: token ids and pooled
vectors recorded by transformers itself (``scripts/make_hf_fixtures.py``, run in a separate
torch venv). No torch is needed here.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

from gradlab.real import (  # noqa: E402
    Encoder,
    PackedEncoder,
    TrainConfig,  # noqa: E402
    load_encoder,
)

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
MODELS = ("bert", "roberta")
SIMCSE = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
HAVE_MINILM = importlib.util.find_spec("all_minilm_l6_v2") is not None


@functools.cache
def fixture_encoder(model: str, pooling: str | None = None):
    """The fixture checkpoint, loaded once per (model, pooling) for the whole module."""
    return load_encoder(FIXTURES / model, pooling=pooling)


@functools.cache
def recorded(model: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / model / "outputs.npz") as z:
        return {k: z[k] for k in z.files}


def copy_model(model: str, dest: Path) -> Path:
    shutil.copytree(FIXTURES / model, dest)
    (dest / "outputs.npz").unlink()
    return dest


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


# --------------------------------------------------------------------------- parity with transformers


@pytest.mark.parametrize("model", MODELS)
def test_fixture_poolings_are_distinct(model):
    # a fixture in which two poolings coincide could not tell them apart (3 layers: h^1 != h^{n-1})
    ref = recorded(model)
    for a in SIMCSE:
        for b in SIMCSE:
            if a < b:
                assert rel_err(ref[a], ref[b]) > 1e-2, (a, b)


@pytest.mark.parametrize("model", MODELS)
def test_token_ids_match_transformers(model):
    ref = recorded(model)
    enc = fixture_encoder(model)
    ids = enc.token_ids(list(ref["sentences"]))
    lengths = ref["attention_mask"].sum(1)
    assert lengths.max() == enc.max_seq_length == 64  # the long sentences are truncated
    for i, n in enumerate(lengths):
        assert ids[i] == ref["input_ids"][i, :n].tolist(), ref["sentences"][i]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("pooling", SIMCSE)
def test_encode_matches_transformers(model, pooling):
    ref = recorded(model)
    enc = fixture_encoder(model, pooling)
    got = enc.encode(list(ref["sentences"]), batch_size=4)  # packed calls
    assert got.shape == ref[pooling].shape and got.dtype == np.float32
    assert rel_err(got, ref[pooling]) <= 1e-4
    # the padded forward (no packing): RoBERTa's positions from the attention mask
    ids, mask = enc.tokenize(list(ref["sentences"]))
    padded = np.asarray(jax.jit(enc.apply)(enc.params, ids, mask))
    assert rel_err(padded, ref[pooling]) <= 1e-4


@pytest.mark.parametrize("model", MODELS)
def test_packed_training_forward_matches_transformers(model):
    # the training path (forward_packed, several sentences per row) gives each sentence its
    # own RoBERTa positions pad+1, pad+2, ...
    ref = recorded(model)
    enc = fixture_encoder(model, "avg_first_last")
    sents = list(ref["sentences"][2:14])
    packed = enc.pack(enc.token_ids(sents), rows=5, width=64)
    assert max(len(set(row[row > 0].tolist())) for row in packed.segment_ids) >= 2  # rows shared
    got = np.asarray(enc.forward_packed(enc.params, enc.frozen, packed, None))
    assert rel_err(got, ref["avg_first_last"][2:14]) <= 1e-4


@pytest.mark.parametrize("model", MODELS)
def test_normalize_option(model):
    ref = recorded(model)["avg"]
    enc = load_encoder(FIXTURES / model, pooling="avg", normalize=True)
    got = enc.encode(list(recorded(model)["sentences"]))
    want = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert fixture_encoder(model).pooling.normalize is False  # HF checkpoints: raw vectors


@pytest.mark.parametrize("model", MODELS)
def test_bfloat16_is_close(model):
    # bf16 keeps 8 mantissa bits (relative rounding 2^-9 ~ 2e-3 per operation); through the
    # embeddings, 3 layers and the pooling the error stays within 5e-2 x max |x|
    ref = recorded(model)
    enc = load_encoder(FIXTURES / model, pooling="avg", dtype=jnp.bfloat16)
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(enc.params)} == {jnp.dtype(jnp.bfloat16)}
    got = enc.encode(list(ref["sentences"]))
    assert got.dtype == np.float32
    assert rel_err(got, ref["avg"]) <= 5e-2
    cos = np.sum(got * ref["avg"], 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref["avg"], axis=1)
    assert cos.min() > 0.995


def test_training_step_on_a_checkpoint():
    optax = pytest.importorskip("optax")
    from gradlab.losses import get_loss
    from gradlab.real.step import make_train_step

    enc = load_encoder(FIXTURES / "roberta", pooling="cls")
    sents = list(recorded("roberta")["sentences"][2:10])
    packed = enc.pack(enc.token_ids(sents), rows=4, width=64)
    opt = optax.adam(1e-3)
    params = jax.tree_util.tree_map(jnp.copy, enc.params)
    step = make_train_step(enc, get_loss("infonce", tau=0.05), opt, packed=True)
    params, _, aux = step(params, opt.init(params), enc.frozen, packed, jax.random.key(0))
    assert np.isfinite(float(aux["loss"])) and float(aux["grad_norm"]) > 0
    assert aux["h"].shape == (8, 32) and not np.allclose(aux["h"], aux["h_prime"])  # two dropout views
    # the pooler is trained with 'cls'
    assert not np.allclose(params["pooler"]["w"], enc.params["pooler"]["w"])


# --------------------------------------------------------------------------- layouts


def test_sharded_weights_load_identically(tmp_path):
    src = copy_model("bert", tmp_path / "sharded")
    state = load_file(str(src / "model.safetensors"))
    (src / "model.safetensors").unlink()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(src / shard))
        weight_map.update({k: shard for k in keys})
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    one = fixture_encoder("bert", "cls")
    two = load_encoder(src, pooling="cls")
    for a, b in zip(jax.tree_util.tree_leaves(one.params), jax.tree_util.tree_leaves(two.params), strict=True):
        np.testing.assert_array_equal(a, b)
    sents = list(recorded("bert")["sentences"])
    np.testing.assert_array_equal(one.encode(sents), two.encode(sents))
    (src / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="model-00002-of-00002.safetensors .*missing"):
        load_encoder(src)


@pytest.mark.parametrize("model, prefix", [("bert", "bert."), ("roberta", "roberta.")])
def test_prefixed_weights_and_extra_heads(tmp_path, model, prefix):
    src = copy_model(model, tmp_path / "prefixed")
    state = load_file(str(src / "model.safetensors"))
    state = {prefix + k: v for k, v in state.items()}
    state["lm_head.bias"] = np.zeros(7, np.float32)  # a head the encoder ignores
    save_file(state, str(src / "model.safetensors"))
    ref = recorded(model)
    got = load_encoder(src, pooling="cls").encode(list(ref["sentences"]))
    assert rel_err(got, ref["cls"]) <= 1e-4


def test_zip_archive(tmp_path):
    src = copy_model("roberta", tmp_path / "m")
    archive = shutil.make_archive(str(tmp_path / "roberta"), "zip", src)
    ref = recorded("roberta")
    got = load_encoder(archive, pooling="avg_top2").encode(list(ref["sentences"]))
    assert rel_err(got, ref["avg_top2"]) <= 1e-4


def test_a_tokenizer_smaller_than_the_embedding_table_is_fine(tmp_path):
    # real checkpoints often pad vocab_size beyond the tokenizer's ids (e.g. to a multiple of 8)
    src = copy_model("roberta", tmp_path / "padded")
    state = load_file(str(src / "model.safetensors"))
    word = state["embeddings.word_embeddings.weight"]
    state["embeddings.word_embeddings.weight"] = np.concatenate([word, np.ones((8, word.shape[1]), word.dtype)])
    save_file(state, str(src / "model.safetensors"))
    edit_config(src, vocab_size=608)
    ref = recorded("roberta")
    got = load_encoder(src, pooling="avg").encode(list(ref["sentences"]))
    assert rel_err(got, ref["avg"]) <= 1e-4


# --------------------------------------------------------------------------- errors


def edit_config(src: Path, **changes) -> None:
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (src / "config.json").write_text(json.dumps(cfg))


def add_tokens(src: Path, tokens: list[str]) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.add_tokens(tokens)
    tok.save(str(src / "tokenizer.json"))


def drop_weight(src: Path, name: str) -> None:
    state = load_file(str(src / "model.safetensors"))
    del state[name]
    save_file(state, str(src / "model.safetensors"))


@pytest.mark.parametrize("damage, needle", [
    (lambda s: (s / "config.json").unlink(), "config.json missing"),
    (lambda s: (s / "tokenizer.json").unlink(), "tokenizer.json missing"),
    (lambda s: (s / "model.safetensors").unlink(), "model.safetensors (or model.safetensors.index.json) missing"),
    (lambda s: edit_config(s, model_type="gpt2"), "unsupported model_type 'gpt2'; supported: bert, roberta"),
    (lambda s: add_tokens(s, ["<extra1>", "<extra2>"]), "tokenizer.json has 602 ids but config.json vocab_size is 600"),
    (lambda s: edit_config(s, type_vocab_size=2),
     "weight 'embeddings.token_type_embeddings.weight' has shape (1, 32); config.json implies (2, 32)"),
    (lambda s: edit_config(s, intermediate_size=48),
     "weight 'encoder.layer.0.intermediate.dense.weight' has shape (64, 32); config.json implies (48, 32)"),
    (lambda s: drop_weight(s, "encoder.layer.1.attention.self.key.bias"),
     "weight 'encoder.layer.1.attention.self.key.bias' missing"),
    (lambda s: drop_weight(s, "pooler.dense.weight"), "pooling 'cls' needs the pooler"),
])
def test_defective_checkpoints_one_line(tmp_path, damage, needle):
    src = copy_model("roberta", tmp_path / "bad")
    damage(src)
    with pytest.raises(ValueError, match=re.escape(needle)) as info:
        load_encoder(src, pooling="cls")
    assert "\n" not in str(info.value)


def test_bad_specs():
    with pytest.raises(ValueError, match="neither minilm, light nor an existing path"):
        load_encoder("no/such/model")
    with pytest.raises(ValueError, match="unknown pooling 'mean_max'"):
        load_encoder(FIXTURES / "bert", pooling="mean_max")
    with pytest.raises(ValueError, match="takes no options"):
        load_encoder(FIXTURES / "bert", dim=8)
    with pytest.raises(ValueError, match="light encoder takes no pooling"):
        load_encoder("light", pooling="avg")
    with pytest.raises(ValueError, match="neither"):
        TrainConfig(encoder="no/such/model")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"))
    assert cfg.learning_rate == 3e-5


# --------------------------------------------------------------------------- the interface


def _check_structure(enc, protocol) -> None:
    """Every member of ``protocol`` exists on ``enc``; methods take the protocol's parameters, in order."""
    assert isinstance(enc, protocol)
    for name, member in vars(protocol).items():
        if name.startswith("_") or not callable(member):
            continue
        want = [p for p in inspect.signature(member).parameters.values() if p.name != "self"]
        have = inspect.signature(getattr(enc, name)).parameters
        got_names = list(have)
        positional = [p.name for p in want if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert got_names[: len(positional)] == positional, (type(enc).__name__, name, got_names)
        for p in want:
            assert p.name in have, (type(enc).__name__, name, p.name)
            assert have[p.name].kind == p.kind, (type(enc).__name__, name, p.name)
            assert (p.default is p.empty) == (have[p.name].default is p.empty), (type(enc).__name__, name, p.name)
    for prop in ("frozen", "dim", "max_seq_length", "params"):
        getattr(enc, prop)
    assert isinstance(enc.dim, int) and isinstance(enc.max_seq_length, int)


def test_every_encoder_implements_the_interface():
    encoders = [fixture_encoder(m) for m in MODELS]
    for enc in encoders:
        _check_structure(enc, PackedEncoder)
        _check_structure(enc, Encoder)
        assert enc.dim == 32
        out = enc.encode(["a sentence"], params=enc.params)
        assert out.shape == (1, enc.dim)
    if HAVE_MINILM:
        minilm, light = load_encoder("minilm"), load_encoder("light", dim=16)
        _check_structure(minilm, PackedEncoder)
        _check_structure(light, Encoder)
        assert not isinstance(light, PackedEncoder)
        assert (minilm.dim, light.dim) == (384, 16)
        assert light.encode(["a sentence"]).shape == (1, 16)


def test_a_structural_mismatch_is_caught():
    class Wrong:
        params = {}
        frozen = None
        dim = 2
        max_seq_length = 8

        def forward(self, params, frozen, ids, mask, key=None):  # renamed parameters
            return None

        def token_ids(self, sentences):
            return []

        def tokenize(self, sentences, pad_to=None):
            return None

        def encode(self, sentences, *, batch_size=1, params=None):
            return None

    with pytest.raises(AssertionError):
        _check_structure(Wrong(), Encoder)
