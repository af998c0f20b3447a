"""``report``: a monitor log turned into Li et al. 2024's Sec. 3.2 curves (figures + data + metadata).

The log may be JSON Lines or CSV (``ParadigmMonitor(sink="run.csv")``): ``read_log``
gives the same records from both, so the outputs of a run are the same either way.
``gradlab.monitor.report_data`` computes the data; ``gradlab.plot.monitor_figures`` draws it
(object API, no pyplot, no global backend change); ``gradlab.outputs.Writer`` writes it:

* ``<prefix>_curves.<fmt>``: over training steps — μ_pos / μ_neg with ±σ bands and
  σ_pos / σ_neg (Fig. 9), the GD-off fraction per loss, the hardest negative's share
  per τ (projected: solid; weight share: dashed; Fig. 7), the dynamic ratios at the
  hardest negative (Fig. 8b), the mean anchor–positive cosine (Fig. 8c), alignment /
  uniformity, m_o / m_r (Zhang et al. 2022), and the Lemma-1 minimum ratio (median, 25–75 %
  band) with the fraction satisfied by the static ratio.
* ``<prefix>_lemma1.<fmt>``: the distribution of the Lemma-1 minimum ratio per λ at
  the first and the last monitored step (Fig. 8a: before / after training) — from
  the histograms when the run recorded them, else from the recorded quantiles.
* ``<prefix>_cosines.<fmt>`` (only with histograms): cos θ_ii' and cos θ_ij' at the
  first and last step (Fig. 5).

Data: ``<prefix>.npz`` holds ``step`` and every numeric series under its flattened
record name (``"gd_mean/infonce"``, ``"hardest_share/0.05"``, ...), NaN where a value
was missing. Metadata: ``<prefix>.json`` (source, counts, invalid reasons, keys,
versions, files). Every file is written atomically.
"""

from __future__ import annotations

import time

__all__ = ["report"]

#: The report figures' resolution.
REPORT_DPI = 120


def report(log_path, out_dir=".", *, formats=("png",), prefix: str = "monitor", plot: bool = True,
           extra_meta: dict | None = None, figures=None) -> dict:
    """Plot a monitor log (JSON Lines or CSV) over training steps; write figures, data and metadata.

    Also ``gradlab.monitor.report``.

    Args:
      log_path: a log written by ``ParadigmMonitor``, JSON Lines or CSV, told apart by its
        content (see ``read_log``; truncated lines are skipped).
      out_dir: where to write (created if needed).
      formats: figure formats (``"png"``, ``"pdf"``, ``"svg"``).
      prefix: file-name prefix.
      plot: ``False`` writes only the data and the metadata.
      extra_meta: more metadata to record (e.g. the command line).
      figures: where the figures are drawn: None, here; or an object with
        ``submit(drawing, paths, dpi)`` (a ``Drawing``) and ``wait() -> paths written`` that draws and
        saves them elsewhere (``gradlab report`` hands them to forked processes).

    Returns:
      The metadata dict (also written to ``<prefix>.json``), with ``"files"``.

    Raises:
      FileNotFoundError: the log does not exist.
      ValueError: the log holds no valid monitor record, is not a monitor log (binary, or neither
        JSON Lines nor CSV), or a figure format is unknown.
    """
    from gradlab.io import load_json
    from gradlab.monitor import report_data
    from gradlab.outputs import Writer, check_formats

    formats = check_formats((formats,) if isinstance(formats, str) else formats)
    data = report_data(log_path)
    extra = dict(extra_meta or {})
    writer = Writer(out_dir, formats=formats, plot=plot, command_line=extra.pop("command_line", None))
    if plot:
        from gradlab.figures._paper import Drawing
        from gradlab.plot import monitor_figure_recipes

        for name, (recipe, args) in monitor_figure_recipes(data.series, data.first, data.last).items():
            if figures is None:
                writer.figure(f"{prefix}_{name}", recipe(*args), dpi=REPORT_DPI)
            else:
                figures.submit(Drawing(recipe, args), writer.figure_paths(f"{prefix}_{name}"), REPORT_DPI)
        if figures is not None:
            writer.written.extend(figures.wait())
    meta = {**data.meta, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "files": [str(p) for p in writer.written] + [str(writer.out / f"{prefix}.{ext}") for ext in ("npz", "json")],
            **extra}
    _, json_path = writer.data(prefix, data.arrays, extra_meta=meta)
    return load_json(json_path) if writer.primary else meta
