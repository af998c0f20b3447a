"""The experiments' write-up, rendered from the studies' own numbers, so prose and data cannot drift apart.

Every study writes ``OUT/<study>/numbers.json``: the numbers its tables show (``numbers``)
and the paper claims it tests with their verdicts (``claims``). A write-up is a Markdown
template whose numbers are placeholders into those files:

* ``{{fig6:m=0.3.best_dev.mean|.2f}}``: the number ``m=0.3.best_dev.mean`` of study ``fig6``,
  formatted with ``.2f`` (any ``format`` spec; without one, ``g``-style to 4 significant
  digits); a list is joined with ", ", a mapping written ``k = v, ...``;
* ``{{claims}}``: the table of every claim, in study order, decided together (Holm over every
  tested claim on the page: ``page_claims``), with its estimate and interval, both p values,
  the test that decides it, its verdict, and where its evidence lies;
* ``{{verdicts}}``: the verdict vocabulary (``gradlab.experiments.stats.VERDICT_MEANING``).

An unknown study or key is an error naming it, never an empty cell.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["render_writeup", "load_numbers", "claims_table", "page_claims", "verdicts_text"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*:\s*([^}|]+?)\s*(?:\|\s*([^}]*?)\s*)?\}\}")
_CLAIMS = re.compile(r"\{\{\s*claims\s*\}\}")
_VERDICTS = re.compile(r"\{\{\s*verdicts\s*\}\}")


def load_numbers(directory: str | Path) -> dict[str, dict[str, Any]]:
    """``{study: {"numbers": ..., "claims": [...], "command": ...}}`` from ``<directory>/<study>.json``.

    Reads the copies of ``numbers.json`` that a results directory keeps (one file per study), and the
    superseded runs kept in ``<directory>/archive/<name>.json`` under their file names (``simcse_50steps``),
    numbers only: a write-up may quote an archived run, its claims are no longer the page's.
    """
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(directory).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "numbers" in data and "claims" in data:
            out[data.get("study", path.stem)] = data
    for path in sorted(Path(directory).glob("archive/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "numbers" in data:
            out[path.stem] = {**data, "claims": [], "archived": True}
    return out


def _text(value: Any, spec: str | None) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} = {_text(v, spec)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v, spec) for v in value)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec) if spec else f"{value:.4g}"
    return str(value)


def _num(x: Any, spec: str = "+.2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _p(x: Any) -> str:
    return _num(x, ".2g")


def _estimate(c: Mapping[str, Any]) -> str:
    if c.get("estimate") is None and c.get("ci95") is None:
        return "—"
    lo, hi = c.get("ci95") or (None, None)
    level = "90 %" if c.get("kind") == "equivalence" else "95 %"
    return f"{_num(c.get('estimate'))} [{_num(lo)}, {_num(hi)}] ({level})"


def _verdict(c: Mapping[str, Any]) -> str:
    v = f"**{c['verdict']}**"
    if c["verdict"] == "inconclusive" and c.get("mde") is not None:
        v += f" (MDE {c['mde']:.2g})"
    elif c["verdict"] == "inconclusive" and c.get("kind") == "equivalence" and c.get("ci95"):
        lo, hi = c["ci95"]
        if lo is not None and hi is not None:
            v += f" (equivalent only within ±{max(abs(lo), abs(hi)):.2g})"
    if c.get("reason"):
        v += f": {c['reason']}"
    return v


def _finding(c: Mapping[str, Any]) -> str:
    text = c["finding"]
    for s in c.get("subclaims") or ():
        text += (f"; *{s['name']}*: {_num(s.get('estimate'))} [{_num(s['ci95'][0])}, {_num(s['ci95'][1])}], "
                 f"p = {_p(s.get('p'))}, Holm {_p(s.get('p_holm'))}: {s['verdict']}")
    return text


def page_claims(studies: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every claim of the studies in the order of ``STUDIES``, decided together: Holm over every tested
    claim on the page."""
    from gradlab.experiments._studies import STUDIES
    from gradlab.experiments.stats import decide_claims

    return decide_claims(_ordered_claims(studies, STUDIES))


def _ordered_claims(studies: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> list[dict[str, Any]]:
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(studies, key=lambda name: (rank.get(name, len(rank)), name))
    return [dict(c, study=c.get("study", name)) for name in names for c in studies[name].get("claims", [])]


def verdicts_text() -> str:
    """The verdict vocabulary as a Markdown list (``{{verdicts}}``)."""
    from gradlab.experiments.stats import VERDICT_MEANING

    return "\n".join(f"- *{v}*: {meaning}." for v, meaning in VERDICT_MEANING.items())


def claims_table(studies: Mapping[str, Mapping[str, Any]], *, evidence: str = "results/{study}.md",
                 decided: bool = False) -> str:
    """The Markdown table of every claim the studies test, decided by Holm over all of them (``decided``:
    take the claims' verdicts as they are): paper, claim, setting, finding, estimate with its interval,
    p, Holm-adjusted p, seeds per arm, the test, the verdict, and where the evidence lies.

    Examples:
      >>> print(claims_table({"s": {"claims": [{"paper": "P 2024", "claim": "x > y", "finding": "+1",
      ...     "setting": "toy", "kind": "direction", "estimate": 1.0, "ci95": [0.5, 1.5], "p": 0.01, "n": 5,
      ...     "test": "paired t", "split": "test", "mde": 0.6, "study": "s"}]}}).splitlines()[-1])
      | P 2024 | x > y | toy | +1 | +1.00 [+0.50, +1.50] (95 %) | 0.01 | 0.01 | 5 | paired t, test | **reproduced** | [results/s.md](results/s.md), `gradlab experiment s` |
    """
    claims = _ordered_claims(studies, ()) if decided else page_claims(studies)
    lines = ["| paper | claim | setting | finding | estimate, paper's direction [interval] | p | p (Holm) | seeds "
             "per arm | test, split | verdict | evidence |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in claims:
        where = evidence.format(study=c["study"])
        test = ", ".join(x for x in (c.get("test"), c.get("split")) if x) or "—"
        lines.append(f"| {c['paper']} | {c['claim']} | {c.get('setting', '')} | {_finding(c)} | {_estimate(c)} | "
                     f"{_p(c.get('p')) if c.get('p') is not None else '—'} | "
                     f"{_p(c.get('p_holm')) if c.get('p_holm') is not None else '—'} | {c.get('n') or '—'} | {test} | "
                     f"{_verdict(c)} | [{where}]({where}), `gradlab experiment {c['study']}` |")
    return "\n".join(lines)


def render_writeup(template: str, studies: Mapping[str, Mapping[str, Any]]) -> str:
    """Fill a write-up template's placeholders from the studies' numbers (see the module doc).

    Raises:
      KeyError: a placeholder names a study or a number that the results do not hold.

    Examples:
      >>> render_writeup("dev {{fig6:m=0.3.best_dev.mean|.2f}}", {"fig6": {"numbers": {"m=0.3.best_dev.mean": 72.149}}})
      'dev 72.15'
    """

    def number(match: re.Match) -> str:
        study, key, spec = match.group(1), match.group(2), match.group(3)
        if study not in studies:
            raise KeyError(f"the write-up quotes study {study!r}, which has no results (have: {', '.join(studies)})")
        numbers = studies[study].get("numbers", {})
        if key not in numbers:
            raise KeyError(f"the write-up quotes {study}:{key}, which the study's numbers do not hold")
        return _text(numbers[key], spec or None)

    text = _CLAIMS.sub(lambda _: claims_table(studies), template)
    text = _VERDICTS.sub(lambda _: verdicts_text(), text)
    return _PLACEHOLDER.sub(number, text)
