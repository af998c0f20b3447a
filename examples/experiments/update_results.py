"""Refresh the committed results from an experiment directory, then render the write-up from them.

    gradlab experiment all --out exp/
    python examples/experiments/update_results.py exp/

Copies each study's ``results.md`` and ``numbers.json`` into ``results/<study>.md`` and
``results/<study>.json``, its figures into ``figures/li2024_<name>_cpu.png`` (a study of another
paper keeps its own key: ``nie2023_cpu.png``, ``rho2023_...``), and renders ``README.md`` from
``README.template.md`` with ``gradlab.experiments.render_writeup``: every number the write-up quotes
comes from those files (``tests/test_writeup.py`` checks that the committed write-up is exactly that
rendering). The page's claims, decided together (Holm over every tested claim on the page), are
written to ``results/claims.json``. With ``--render-only`` it only re-renders from the committed
results.

``--simcse-claims`` re-decides the committed ``results/simcse.json``'s claims from its per-seed
numbers (``gradlab.experiments.simcse_claims``): the simcse study's runs need a machine of their own,
so its committed numbers are the evidence its claims are re-decided from.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from gradlab.experiments import (
    STUDIES,
    load_numbers,
    page_claims,
    portable_command,
    render_writeup,
    simcse_claims,
    simcse_comparisons,
)

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent.parent / "figures"


def figure_name(study: str, stem: str) -> str:
    """The gallery name of a study's figure: ``fig6`` -> ``li2024_fig6_cpu.png``, ``nie2023`` -> ``nie2023_cpu.png``."""
    paper = "" if stem.startswith(("nie2023", "rho2023", "farina2023", "zhang2022")) else "li2024_"
    return f"{paper}{stem}_cpu.png"


def copy_results(out: Path) -> list[Path]:
    written = []
    for study in STUDIES:
        src = out / study
        if study == "all" or not (src / "numbers.json").is_file():
            continue
        for name, dest in (("results.md", f"{study}.md"), ("numbers.json", f"{study}.json")):
            written.append(Path(shutil.copyfile(src / name, HERE / "results" / dest)))
        for png in sorted(src.glob("*.png")):
            written.append(Path(shutil.copyfile(png, FIGURES / figure_name(study, png.stem))))
    return written


SIMCSE_NOTE = ("*Re-decided from this run's per-seed numbers (`update_results.py --simcse-claims`): the claims and "
               "the `claim.*` numbers in `simcse.json` are paired t tests over the seeds, and no claim is decided "
               "while a run's best dev is at its last evaluation. The comparison table below is the run's "
               "original output (Welch's t).*")


def refresh_simcse_claims() -> Path:
    """results/simcse.json's claims re-decided from its own per-seed numbers; its command made portable."""
    path = HERE / "results" / "simcse.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["command"] = portable_command(data["command"])
    numbers, scale = data["numbers"], data["numbers"]["scale"]
    for loss in {k.split(".")[0] for k in numbers if k.endswith(".best_step.seeds")}:
        if f"{loss}.last_step.seeds" not in numbers and scale["steps"] % scale["eval_every"] == 0:
            # written before the last evaluation's step was recorded: the trainer evaluates every
            # eval_every steps, so with eval_every dividing steps the last evaluation is at steps
            numbers[f"{loss}.last_step.seeds"] = [float(scale["steps"])] * len(numbers[f"{loss}.best_step.seeds"])
            numbers["last_step.source"] = "the scale: evaluations every eval_every steps up to steps"
    numbers.update(simcse_comparisons(numbers))  # paired over the seeds, as the builder now exports them
    data["claims"] = simcse_claims(numbers, scale)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md = HERE / "results" / "simcse.md"
    lines = [f"Command: `{portable_command(line[10:-1])}`" if line.startswith("Command: `") else line
             for line in md.read_text(encoding="utf-8").split("\n")]
    if SIMCSE_NOTE not in lines:
        lines[1:1] = ["", SIMCSE_NOTE]
    md.write_text("\n".join(lines), encoding="utf-8")
    return path


def render() -> list[Path]:
    studies = load_numbers(HERE / "results")
    template = (HERE / "README.template.md").read_text(encoding="utf-8")
    text = render_writeup(template, studies)
    path = HERE / "README.md"
    path.write_text(text, encoding="utf-8")
    claims = HERE / "results" / "claims.json"
    claims.write_text(json.dumps({"claims": page_claims(studies)}, indent=2, ensure_ascii=False) + "\n",
                      encoding="utf-8")
    return [path, claims]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="the experiment directory (gradlab experiment ... --out)")
    ap.add_argument("--render-only", action="store_true", help="only re-render README.md from results/")
    ap.add_argument("--simcse-claims", action="store_true",
                    help="re-decide results/simcse.json's claims from its per-seed numbers first")
    args = ap.parse_args(argv)
    if args.simcse_claims:
        print(refresh_simcse_claims())
    if not args.render_only:
        if args.out is None or not args.out.is_dir():
            print(f"update_results.py: no experiment directory {args.out}", file=sys.stderr)
            return 2
        for path in copy_results(args.out):
            print(path)
    for path in render():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
