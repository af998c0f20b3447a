"""Optional dependencies of gradlab.real: imported on first use, with a clear error."""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = 'pip install -e ".[real]" and bash scripts/install_real.sh'


def require(module: str, *, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise ImportError telling the user how to install the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        what = f" (needed for {purpose})" if purpose else ""
        raise ImportError(
            f"gradlab.real needs the optional package {module.split('.')[0]!r}{what}; "
            f"install the extra with: {INSTALL_HINT}"
        ) from e
