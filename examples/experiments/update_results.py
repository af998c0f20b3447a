"""Refresh the committed results from an experiment directory, then render the write-up from them.

    gradlab experiment all --out exp/
    python examples/experiments/update_results.py exp/

Copies each study's ``results.md`` and ``numbers.json`` into ``results/<study>.md`` and
``results/<study>.json``, its figures into ``figures/li2024_<name>_cpu.png`` (and
``nie2023_<name>_cpu.png``), and renders ``README.md`` from ``README.template.md`` with
``gradlab.experiments.render_writeup``: every number the write-up quotes comes from those
files (``tests/test_writeup.py`` checks that the committed write-up is exactly that rendering).
With ``--render-only`` it only re-renders the write-up from the committed results.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from gradlab.experiments import STUDIES, load_numbers, render_writeup

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent.parent / "figures"


def figure_name(study: str, stem: str) -> str:
    """The gallery name of a study's figure: ``fig6`` -> ``li2024_fig6_cpu.png``, ``nie2023`` -> ``nie2023_cpu.png``."""
    paper = "" if stem.startswith("nie2023") else "li2024_"
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


def render() -> Path:
    template = (HERE / "README.template.md").read_text(encoding="utf-8")
    text = render_writeup(template, load_numbers(HERE / "results"))
    path = HERE / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="the experiment directory (gradlab experiment ... --out)")
    ap.add_argument("--render-only", action="store_true", help="only re-render README.md from results/")
    args = ap.parse_args(argv)
    if not args.render_only:
        if args.out is None or not args.out.is_dir():
            print(f"update_results.py: no experiment directory {args.out}", file=sys.stderr)
            return 2
        for path in copy_results(args.out):
            print(path)
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
