"""MkDocs hooks (mkdocs.yml ``hooks:``): pages generated at build time, never hand-written.

- ``cli.md``: the CLI reference, from the Typer app itself (every command's ``--help``).
- ``gallery.md``: the figure gallery, from ``figures/README.md`` (one home for the index of
  figures), each figure shown with the command that regenerates it.
- ``figures/*.png``: copied into the site so the gallery can show them.
- ``explorer.html``: the static loss explorer on the home page (``gradlab.explore.static_explorer``:
  the maps precomputed by ``gradlab.simulate`` for a few slider values, switched in the browser).
- ``notebooks/*.ipynb``: added as pages, which mkdocs-jupyter (``mkdocs.yml``) executes and renders
  at build time: the repository stores them without outputs, so no output on the site is stale.
- ``api/*.md``: they name public objects only (``::: gradlab.monitor.analyze``); a name of a lazy
  package (``gradlab``, ``gradlab.monitor``, ...: its ``_LAZY`` table), which a static reader
  cannot see, is pointed at the module that defines it, its heading the public name.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def _cli_reference() -> str:
    """Markdown of ``gradlab --help`` and of every command's ``--help``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import typer
    from gradlab_cli.app import app

    root = typer.main.get_command(app)
    ctx = root.make_context("gradlab", [], resilient_parsing=True)
    parts = [
        "# CLI reference",
        "",
        "Generated at build time from the Typer app (`gradlab_cli.app`): what `gradlab COMMAND --help` prints.",
        "Every computing command writes the figure, `STEM.npz` and `STEM.json` into `--out`;",
        "a user error is one line on stderr with exit code 2 (`--debug` or `GRADLAB_DEBUG=1` shows the traceback).",
        "",
        "## gradlab",
        "",
        "```text",
        root.get_help(ctx).rstrip(),
        "```",
    ]
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        parts += ["", f"## gradlab {name}", "", "```text", command.get_help(sub).rstrip(), "```"]
    return "\n".join(parts) + "\n"


_ROW = re.compile(r"^\|\s*`(?P<file>[^`]+\.png)`\s*\|(?P<reproduces>[^|]*)\|(?P<what>.*)\|(?P<diff>[^|]*)\|\s*$")  # "what" may hold |x|


_OUTSIDE = re.compile(r"\[[^\]]*\]\(\.\./(?P<path>[^)]+)\)")
_NOTEBOOK = re.compile(r"\]\(\.\./(?P<path>notebooks/[^)]+\.ipynb)\)")


def _gallery() -> str:
    """The gallery: figures/README.md's preamble, then one section per table row with its image."""
    text = (ROOT / "figures" / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    preamble, rows, after = [], [], []
    for line in lines[1:]:
        match = _ROW.match(line)
        if match:
            rows.append(match)
        elif line.startswith("|"):
            continue  # the table's header and rule
        elif rows:
            after.append(line)
        else:
            preamble.append(line)
    parts = ["# Figure gallery", "", "Generated from `figures/README.md` at build time.", *preamble]
    for row in rows:
        name = row["file"]
        fid = name.removesuffix(".png")
        parts += [
            "", f"## {fid}", "",
            f"![{fid}](figures/{name})", "",
            f"**Reproduces:** {row['reproduces'].strip()}.", "",
            f"**Shows:** {row['what'].strip()}", "",
            f"**Differences from the paper:** {row['diff'].strip()}", "",
            "```bash", f"gradlab figures --only {fid} --out figures/", "```",
        ]
    parts += ["", *after]
    # Links out of figures/ into the repository (../examples/...) have no page on the site: keep the path.
    # The notebooks do have pages (notebooks/NAME.ipynb, next to gallery.md): link those.
    text = _NOTEBOOK.sub(lambda m: f"]({m['path']})", "\n".join(parts))
    return _OUTSIDE.sub(lambda m: f"`{m['path']}`", text).rstrip() + "\n"


def _static_explorer() -> str:
    """The home page's static explorer (a few seconds of simulation: small grid, few values)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gradlab.explore import static_html

    return static_html()


_TARGET = re.compile(r"^::: (gradlab(?:\.[a-z]\w*)*)\.(\w+)\n(    options:\n)?", re.M)


def _lazy_target(match: re.Match) -> str:
    package, name = match.group(1), match.group(2)
    try:
        lazy = getattr(importlib.import_module(package), "_LAZY", {})
    except ImportError:
        lazy = {}
    if name not in lazy:
        return match.group(0)
    return f"::: {lazy[name]}.{name}\n    options:\n      show_root_full_path: false\n"


def on_page_markdown(markdown, page, config, files):
    """API pages: the public names of lazy packages, pointed at their defining modules."""
    if not page.file.src_uri.startswith("api/"):
        return markdown
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return _TARGET.sub(_lazy_target, markdown)


@event_priority(50)  # before mkdocs-jupyter's on_files (priority 0), which turns the notebooks into pages
def on_files(files, config):
    """Add the generated pages, the figure images and the notebooks to the build."""
    files.append(File.generated(config, "cli.md", content=_cli_reference()))
    files.append(File.generated(config, "gallery.md", content=_gallery()))
    files.append(File.generated(config, "explorer.html", content=_static_explorer()))
    for png in sorted((ROOT / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{png.name}", abs_src_path=str(png)))
    # A plain File rooted at the repository, not File.generated: mkdocs-jupyter's page wrapper
    # recomputes the source path from src_dir, which a generated file does not have.
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        files.append(File(f"notebooks/{notebook.name}", src_dir=str(ROOT), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
