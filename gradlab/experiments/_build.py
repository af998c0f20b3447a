"""Turn a study's run records into its outputs: figure(s), Result bundle(s), ``results.md``, ``numbers.json``.

One builder per study, each in the module of its concept:

* ``_tables``: the :class:`Context` every builder writes through, and the tables and exports;
* ``stats`` (public): the tests, Holm's adjustment and the verdicts that decide every claim;
* ``_build_components``: Li et al. 2024 Figs. 5–7 (the Eq. 5 baseline's components);
* ``_build_dynamics``: Figs. 8, 9, the paths on the maps, Zhang et al. 2022's m_o and m_r;
* ``_build_table3``: Table 3, Fig. 1 and Table 3 under SimCSE's recipe;
* ``_build_papers``: Nie et al. 2023, Rho et al. 2023, Farina et al. 2023.

The figures are drawn by ``gradlab.plot``, which only draws: what they show is computed here.
"""

from __future__ import annotations

from collections.abc import Callable

from gradlab.experiments._build_components import build_fig5, build_fig6, build_fig7
from gradlab.experiments._build_dynamics import (
    build_fig8,
    build_fig9,
    build_trajectory,
    build_zhang2022,
)
from gradlab.experiments._build_papers import build_farina2023, build_nie2023, build_rho2023
from gradlab.experiments._build_table3 import build_fig1, build_simcse, build_table3
from gradlab.experiments._tables import Context

__all__ = ["BUILDERS", "Context"]

BUILDERS: dict[str, Callable[[Context], None]] = {
    "fig6": build_fig6, "fig5": build_fig5, "fig7": build_fig7, "fig8": build_fig8, "fig9": build_fig9,
    "table3": build_table3, "fig1": build_fig1, "nie2023": build_nie2023, "trajectory": build_trajectory,
    "rho2023": build_rho2023, "farina2023": build_farina2023, "zhang2022": build_zhang2022, "simcse": build_simcse,
}
