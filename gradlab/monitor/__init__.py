"""The PyTorch-free training hook: Li et al. 2024's Sec. 3.2 statistics measured on real embeddings.

``ParadigmMonitor`` measures each monitored batch (two views h, h_prime) in one
jitted pass (in row blocks: a sharded global batch never forms an N × N matrix) and
returns a record, with the dimensional-collapse metrics ``rankme``, ``alpha_req`` and
``embedding_std``. Records go nowhere unless asked: a JSON Lines / CSV log,
TensorBoard (``TensorBoardSink``, ``"tb:LOGDIR"``), an experiment tracker
(``LogSink(wandb.log)``, ``LogSink(mlflow.log_metrics)``, ``LogSink(trackio.log)``) or
any callable. ``analyze`` gives the same statistics per batch on saved embeddings;
``tracker_sink("wandb")`` opens such a tracker by name; ``read_log`` reads either log
format back into the same records, and ``report_data`` computes a log's report (the series
over the steps, the first and last records, the counts) without drawing.

``report``, which draws that report and writes it (figures + data + metadata), lives a floor
up, in ``gradlab.figures`` (the monitor draws nothing); the name still works here.

Importing this package does not import JAX, matplotlib, or any deep-learning framework.
"""

from __future__ import annotations

from gradlab._lazy import attach

_LAZY = {
    "ParadigmMonitor": "gradlab.monitor._monitor",
    "MonitorInputError": "gradlab.monitor._monitor",
    "analyze": "gradlab.monitor._monitor",
    "analysis_records": "gradlab.monitor._monitor",
    "min_ratio_distribution": "gradlab.monitor._monitor",
    "STATISTICS": "gradlab.monitor._monitor",
    "DEFAULT_LOSSES": "gradlab.monitor._monitor",
    "DEFAULT_TAUS": "gradlab.monitor._monitor",
    "DEFAULT_LAMBDAS": "gradlab.monitor._monitor",
    "DEFAULT_RATIO_LOSSES": "gradlab.monitor._monitor",
    "JSONLSink": "gradlab.monitor._sinks",
    "CSVSink": "gradlab.monitor._sinks",
    "TensorBoardSink": "gradlab.monitor._sinks",
    "LogSink": "gradlab.monitor._sinks",
    "scalars": "gradlab.monitor._sinks",
    "tracker_sink": "gradlab.monitor._sinks",
    "TRACKERS": "gradlab.monitor._sinks",
    "rankme": "gradlab.monitor._collapse",
    "alpha_req": "gradlab.monitor._collapse",
    "embedding_std": "gradlab.monitor._collapse",
    "read_log": "gradlab.monitor._sinks",
    "iter_log": "gradlab.monitor._sinks",
    "log_format": "gradlab.monitor._sinks",
    "flatten": "gradlab.monitor._sinks",
    "unflatten": "gradlab.monitor._sinks",
    "to_array": "gradlab.monitor._convert",
    "log_series": "gradlab.monitor._report",
    "report_data": "gradlab.monitor._report",
    "ReportData": "gradlab.monitor._report",
    # a floor up (it draws), imported on first use: gradlab.figures.report
    "report": "gradlab.figures",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = attach(__name__, _LAZY)
