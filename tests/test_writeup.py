"""The experiments' write-up quotes only the committed result files: it is their rendering, to the byte.

``examples/experiments/README.md`` is ``README.template.md`` with every number filled in from
``results/<study>.json`` (the ``numbers.json`` each study writes). If a result file changes
without the write-up being re-rendered, or the write-up is edited by hand, this test fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradlab.experiments import claims_table, load_numbers, render_writeup

HERE = Path(__file__).resolve().parent.parent / "examples" / "experiments"
VERDICTS = {"reproduced", "partial", "not reproduced", "not tested"}


def test_the_committed_writeup_is_the_rendering_of_the_committed_results():
    studies = load_numbers(HERE / "results")
    template = (HERE / "README.template.md").read_text(encoding="utf-8")
    rendered = render_writeup(template, studies)
    assert (HERE / "README.md").read_text(encoding="utf-8") == rendered, (
        "examples/experiments/README.md is stale: run python examples/experiments/update_results.py --render-only")


def test_every_study_of_the_writeup_has_results_and_claims_with_a_verdict():
    studies = load_numbers(HERE / "results")
    assert {"fig5", "fig6", "fig7", "fig8", "fig9", "table3", "fig1", "nie2023", "trajectory"} <= set(studies)
    claims = [c for s in studies.values() for c in s["claims"]]
    assert len(claims) >= 15
    assert {c["verdict"] for c in claims} <= VERDICTS
    for study in studies:
        assert (HERE / "results" / f"{study}.md").is_file(), study
    # the claims table of the write-up lists every claim once
    text = (HERE / "README.md").read_text(encoding="utf-8")
    assert claims_table(studies) in text


def test_placeholders_fail_loudly_and_format_as_asked(tmp_path):
    studies = {"s": {"numbers": {"a.mean": 1.23456, "none": None, "xs": [0.5, 1.0], "tag": "x"}, "claims": []}}
    assert render_writeup("{{s:a.mean|.2f}} {{s:none}} {{s:xs|.1f}} {{s:tag}}", studies) == "1.23 n/a 0.5, 1.0 x"
    with pytest.raises(KeyError, match="s:missing"):
        render_writeup("{{s:missing}}", studies)
    with pytest.raises(KeyError, match="'t'"):
        render_writeup("{{t:a.mean}}", studies)
    (tmp_path / "s.json").write_text(json.dumps({"study": "s", **studies["s"]}))
    (tmp_path / "other.json").write_text("{}")  # not a study's numbers: ignored
    assert load_numbers(tmp_path) == {"s": {"study": "s", **studies["s"]}}
