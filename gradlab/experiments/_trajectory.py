"""Where real training sits on the paper's maps: a run's monitored (μ_pos, μ_neg) path on the
simulated GD map and ratio map of its own loss (Li et al. 2024 Figs. 2, 4), simulated with the
σ_pos, σ_neg the monitor measured during that run and the run's batch size N.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["run_path", "run_loss", "trajectory", "write_trajectory"]


def run_path(run: str | Path) -> dict[str, np.ndarray]:
    """The monitored path of a run directory (or of a monitor log file).

    Returns:
      ``{"step", "mu_pos", "mu_neg", "sigma_pos", "sigma_neg"}``, (T,) arrays over the valid records.
    """
    from gradlab.monitor import read_log

    path = Path(run)
    log = path / "paradigm_monitor.jsonl" if path.is_dir() else path
    if not log.is_file():
        raise ValueError(f"{str(path)!r} holds no monitor log (paradigm_monitor.jsonl)")
    keys = ("step", "mu_pos", "mu_neg", "sigma_pos", "sigma_neg")
    recs = [r for r in read_log(log) if r.get("valid") and all(isinstance(r.get(k), (int, float)) for k in keys)]
    if not recs:
        raise ValueError(f"monitor log {str(log)!r} has no valid record with μ_pos, μ_neg, σ_pos, σ_neg")
    return {k: np.array([float(r[k]) for r in recs]) for k in keys}


def run_loss(run: str | Path):
    """The configured ``gradlab.Loss`` a run trained: from an experiment's ``config.json`` or a
    ``gradlab train`` directory's ``train.json``; None when the directory names neither."""
    from gradlab.io import load_json

    d = Path(run)
    d = d if d.is_dir() else d.parent
    if (d / "config.json").is_file():
        from gradlab.design import resolve_loss

        cfg = load_json(d / "config.json")
        if isinstance(cfg, dict) and "loss" in cfg:
            return resolve_loss(cfg["loss"]), int(cfg.get("batch_size", 64))
    if (d / "train.json").is_file():
        from gradlab.losses import get_loss

        cfg = load_json(d / "train.json").get("config", {})
        if cfg.get("transform") is None and "loss" in cfg:
            return get_loss(cfg["loss"], **dict(cfg.get("loss_params") or {})), int(cfg.get("batch_size", 64))
    return None, None


def trajectory(loss, path: dict[str, np.ndarray], *, batch_size: int, grid: int = 50, batches: int = 200,
               seed: int = 0) -> dict[str, Any]:
    """Simulated GD and ratio maps of ``loss`` at the run's mean σ_pos, σ_neg and N, and the path's cells.

    Args:
      loss: a ``gradlab.Loss`` (or registry name) with a per-anchor kernel.
      path: ``run_path``'s dict.
      batch_size: N of the simulated batches (the run's batch size).
      grid, batches, seed: the Monte-Carlo ``Protocol`` (Li et al. 2024 App. A.1 uses 100, 1000).

    Returns:
      ``{"gd": Result, "ratio": Result, "path": Result}``; the path Result has dims ``("step",)``,
      mean = the simulated GD at the path's nearest cells, extras ``mu_pos``, ``mu_neg``,
      ``ratio`` (simulated ratio there, NaN where masked), ``i_pos``, ``i_neg``.
    """
    from gradlab import simulate
    from gradlab.io import Result
    from gradlab.plot import path_cells

    sp, sn = float(np.mean(path["sigma_pos"])), float(np.mean(path["sigma_neg"]))
    proto = simulate.Protocol(grid=grid, batches=batches, batch_size=batch_size, sigma_pos=sp, sigma_neg=sn,
                              seed=seed, mu_pos_range=(math.pi / 40, math.pi / 2), mu_neg_range=(math.pi / 20, math.pi))
    gd = simulate.gd_map(loss, proto)
    ratio = simulate.ratio_map(loss, proto)
    ip, ineg = path_cells(gd, path["mu_pos"], path["mu_neg"])
    r_vals = np.where(ratio.mask[ip, ineg], np.nan, ratio.mean[ip, ineg]) if ratio.mask is not None else ratio.mean[ip, ineg]
    along = Result(dims=("step",), coords={"step": path["step"]}, mean=np.asarray(gd.mean)[ip, ineg],
                   extra={"mu_pos": path["mu_pos"], "mu_neg": path["mu_neg"], "ratio": np.asarray(r_vals, float),
                          "i_pos": ip, "i_neg": ineg, "sigma_pos": path["sigma_pos"], "sigma_neg": path["sigma_neg"]},
                   meta={"statistic": "simulated GD along the monitored path", "sigma_pos": sp, "sigma_neg": sn,
                         "protocol": proto.to_dict()})
    return {"gd": gd, "ratio": ratio, "path": along}


def write_trajectory(run: str | Path, out: str | Path, *, grid: int = 50, batches: int = 200,
                     fmt: str = "png", title: str | None = None, command_line: str | None = None) -> list[Path]:
    """``gradlab report RUN --on-map``: draw a run directory's path on its loss's maps into ``out``.

    Writes, through ``gradlab.outputs.Writer`` (``command_line`` recorded, default ``sys.argv``),
    ``on_map.<fmt>`` and the Result bundles ``on_map_gd``, ``on_map_ratio``, ``on_map_path``.
    """
    from gradlab.outputs import Writer
    from gradlab.plot import loss_title, trajectory_on_maps

    path = run_path(run)
    loss, batch_size = run_loss(run)
    if loss is None:
        raise ValueError(f"{str(run)!r} is not a run directory (no config.json / train.json naming a loss); "
                         "--on-map needs the run's loss")
    res = trajectory(loss, path, batch_size=batch_size, grid=grid, batches=batches)
    writer = Writer(out, formats=[fmt], command_line=command_line,
                    meta={"run": str(run), "grid": grid, "batches": batches})
    params = ", ".join(f"{k}={v:g}" for k, v in loss.params.items())
    name = f"{loss_title(loss.spec.name)} ({params})" if params else loss_title(loss.spec.name)
    sp, sn = res["path"].meta["sigma_pos"], res["path"].meta["sigma_neg"]
    fig = trajectory_on_maps([res["gd"], res["ratio"]], path["mu_pos"], path["mu_neg"],
                             titles=["simulated GD", "simulated ratio R"], quantities=["gd", "ratio"],
                             ranges=[(0.0, 1.0), (0.0, 3.0)],
                             suptitle=title or f"{name}: monitored path of {Path(run).name}\n"
                                               f"(maps simulated with σ_pos={sp:.3f}, σ_neg={sn:.3f}, N={batch_size})")
    writer.figure("on_map", fig)
    for key in ("gd", "ratio", "path"):
        writer.result(f"on_map_{key}", res[key])
    return writer.written
