"""The experiments' write-up, rendered from the studies' own numbers, so prose and data cannot drift apart.

Every study writes ``OUT/<study>/numbers.json``: the numbers its tables show (``numbers``)
and the paper claims it tests with their verdicts (``claims``). A write-up is a Markdown
template whose numbers are placeholders into those files:

* ``{{fig6:m=0.3.best_dev.mean|.2f}}``: the number ``m=0.3.best_dev.mean`` of study ``fig6``,
  formatted with ``.2f`` (any ``format`` spec; without one, ``g``-style to 4 significant
  digits); a list is joined with ", ", a mapping written ``k = v, ...``;
* ``{{claims}}``: the table of every claim, in study order, with its verdict, the test that
  decides it, and where its evidence lies.

An unknown study or key is an error naming it, never an empty cell.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["render_writeup", "load_numbers", "claims_table"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*:\s*([^}|]+?)\s*(?:\|\s*([^}]*?)\s*)?\}\}")
_CLAIMS = re.compile(r"\{\{\s*claims\s*\}\}")


def load_numbers(directory: str | Path) -> dict[str, dict[str, Any]]:
    """``{study: {"numbers": ..., "claims": [...], "command": ...}}`` from ``<directory>/<study>.json``.

    Reads the copies of ``numbers.json`` that a results directory keeps (one file per study).
    """
    out = {}
    for path in sorted(Path(directory).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "numbers" in data and "claims" in data:
            out[data.get("study", path.stem)] = data
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


def claims_table(studies: Mapping[str, Mapping[str, Any]], *, evidence: str = "results/{study}.md") -> str:
    """The Markdown table of every claim the studies test: paper, claim, finding, verdict, test, evidence.

    Examples:
      >>> print(claims_table({"s": {"claims": [{"paper": "P 2024", "claim": "x > y", "finding": "+1",
      ...     "verdict": "reproduced", "test": "t", "study": "s"}]}}))
      | paper | claim | CPU-scale finding | verdict | decided by | evidence |
      |---|---|---|---|---|---|
      | P 2024 | x > y | +1 | **reproduced** | t | [results/s.md](results/s.md), `gradlab experiment s` |
    """
    lines = ["| paper | claim | CPU-scale finding | verdict | decided by | evidence |", "|---|---|---|---|---|---|"]
    for study, data in studies.items():
        for c in data.get("claims", []):
            where = evidence.format(study=c.get("study", study))
            lines.append(f"| {c['paper']} | {c['claim']} | {c['finding']} | **{c['verdict']}** | {c['test']} | "
                         f"[{where}]({where}), `gradlab experiment {c.get('study', study)}` |")
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
    return _PLACEHOLDER.sub(number, text)
