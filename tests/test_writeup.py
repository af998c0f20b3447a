"""The experiments' write-up quotes only the committed result files: it is their rendering, to the byte.

``examples/experiments/README.md`` is ``README.template.md`` with every number filled in from
``results/<study>.json`` (the ``numbers.json`` each study writes). If a result file changes
without the write-up being re-rendered, or the write-up is edited by hand, this test fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradlab.experiments import (
    claims_table,
    load_numbers,
    page_claims,
    render_writeup,
    verdicts_text,
)
from gradlab.experiments.stats import VERDICTS

HERE = Path(__file__).resolve().parent.parent / "examples" / "experiments"
TESTED_FIELDS = ("estimate", "ci95", "p", "p_holm", "n", "split", "test", "verdict")


def test_the_committed_writeup_is_the_rendering_of_the_committed_results():
    studies = load_numbers(HERE / "results")
    template = (HERE / "README.template.md").read_text(encoding="utf-8")
    rendered = render_writeup(template, studies)
    assert (HERE / "README.md").read_text(encoding="utf-8") == rendered, (
        "examples/experiments/README.md is stale: run python examples/experiments/update_results.py --render-only")


def test_every_study_of_the_writeup_has_results_and_claims_with_a_verdict():
    studies = load_numbers(HERE / "results")
    assert {"fig5", "fig6", "fig7", "fig8", "fig9", "table3", "fig1", "nie2023", "trajectory", "rho2023",
            "farina2023", "zhang2022", "simcse"} <= set(studies)
    claims = page_claims(studies)
    assert len(claims) >= 30
    assert {c["verdict"] for c in claims} <= set(VERDICTS)
    for study, data in studies.items():
        assert data.get("archived") or (HERE / "results" / f"{study}.md").is_file(), study
    text = (HERE / "README.md").read_text(encoding="utf-8")
    assert claims_table(studies) in text  # the claims table of the write-up lists every claim once
    assert verdicts_text() in text  # and the page defines its verdicts


def test_the_committed_page_claims_are_the_holm_decision_over_the_results():
    studies = load_numbers(HERE / "results")
    committed = json.loads((HERE / "results" / "claims.json").read_text(encoding="utf-8"))["claims"]
    assert committed == json.loads(json.dumps(page_claims(studies)))


def test_every_tested_claim_carries_its_numbers_and_enough_seeds():
    for c in page_claims(load_numbers(HERE / "results")):
        if c["kind"] in ("not tested", "descriptive"):
            assert c["verdict"] == c["kind"] and c.get("reason"), c["id"]
            continue
        for field in TESTED_FIELDS:
            assert field in c, (c["id"], field)
        assert c["n"] >= 5, c["id"]  # at least 5 seeds per arm for every claim a test decides
        lo, hi = c["ci95"]
        assert lo <= c["estimate"] <= hi, c["id"]
        assert c["p_holm"] >= c["p"], c["id"]
        for sub in c.get("subclaims", ()):
            assert sub["name"] and sub["n"] >= 5 and sub["verdict"] in VERDICTS, c["id"]


def test_results_name_no_absolute_path():
    for path in sorted((HERE / "results").rglob("*")):
        if path.suffix in (".json", ".md"):
            text = path.read_text(encoding="utf-8")
            for bad in ("/work/", "/tmp/", "/home/", "/root/", "/Users/"):
                assert bad not in text, (path.name, bad)


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
