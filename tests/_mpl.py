"""Run plotting code in a fresh interpreter whose matplotlib settings are the caller's own."""

from __future__ import annotations

import os
import subprocess
import sys


def callers_settings_after(body: str) -> list[str]:
    """Set font.size = 17 and note the backend, run ``body``, then report what the caller sees.

    Returns the printed words: ``body``'s own prints, then font.size (``"17.0"`` if untouched),
    ``"True"`` if the backend is unchanged, and ``"True"`` if pyplot was imported.
    """
    code = (
        "import matplotlib as mpl, sys\n"
        "mpl.rcParams['font.size'] = 17.0\n"
        "backend = mpl.get_backend()\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})\n"
        f"{body}\n"
        "print(mpl.rcParams['font.size'], mpl.get_backend() == backend, 'matplotlib.pyplot' in sys.modules)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "MPLBACKEND": "Agg"}).stdout.split()
