"""The ``explore`` extra (Panel, and the Bokeh it brings): imported on first use, with a clear error."""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = 'pip install -e ".[explore]" (or pip install "gradlab[explore]")'


def require_extra(module: str = "panel") -> ModuleType:
    """Import ``module`` of the ``explore`` extra, or raise a one-line ImportError with the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"gradlab explore needs the optional package {module.split('.')[0]!r}; "
                          f"install the extra with: {INSTALL_HINT}") from e
