"""Lazy public names for a package: ``import gradlab`` stays cheap (no JAX, no matplotlib)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping


def attach(package: str, names: Mapping[str, str], submodules: Iterable[str] = ()):
    """``(__getattr__, __dir__)`` for ``package``: each of ``names`` (name -> defining module)
    and each submodule is imported on first use and then cached in the package's globals."""
    namespace = sys.modules[package].__dict__
    submodules = frozenset(submodules)

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(namespace.get("__all__", ())) | submodules)

    return __getattr__, __dir__
