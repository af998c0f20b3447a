"""CLI plug-in for gradlab.explore: ``gradlab explore``, the live loss explorer on a local page.

Registered by ``cli/app.py`` through ``register(app)``. It imports only ``_common`` and the library's
public names; Panel (the ``explore`` extra) loads inside the command, and a missing extra is the
one-line error that names the install command (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from gradlab_cli._common import CONTEXT, LOSS_HELP, Compose, Debug, Params, Seed, fail, parse_params

#: The live protocol's defaults (``gradlab.explore.LIVE``, as literals so that ``--help`` loads no JAX; a test
#: checks that they agree).
GRID, BATCHES, BATCH_SIZE = 50, 200, 128


def explore(
    loss: Annotated[str | None, typer.Option("--loss", "-l", help="The loss shown first (default infonce): " + LOSS_HELP + " A FILE.py:FUNCTION loss joins the page's menu.")] = None,
    compose: Compose = None,
    param: Params = None,
    run: Annotated[Path | None, typer.Option("--run", help="A run folder (gradlab train --out DIR: its paradigm_monitor.jsonl) or a monitor log, drawn on the maps as its (μ_pos, μ_neg) path.")] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the page (0: any free port; the URL is printed).")] = 5006,
    address: Annotated[str, typer.Option("--address", help="Interface to listen on (default: this machine only).")] = "127.0.0.1",
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open the page in a browser.")] = False,
    grid: Annotated[int, typer.Option("--grid", help="Points per μ axis of the live maps (the page's toggle switches to the paper's 100).")] = GRID,
    batches: Annotated[int, typer.Option("--batches", help="Batches per cell of the live maps (the paper: 1000).")] = BATCHES,
    batch_size: Annotated[int, typer.Option("--batch-size", "-N", help="N: 1 positive + N-1 negatives.")] = BATCH_SIZE,
    seed: Seed = 0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the page's export button writes explore_view.{png,npz,json}.")] = Path("explore"),
    debug: Debug = False,
):
    """The live loss explorer: a loss's GD map, hardest-negative share, ratio map and Lemma-1 panel
    (Li et al. 2024), redrawn by gradlab.simulate as its sliders (τ, m, r, λ, ...) move, on a local page.

    Needs the explore extra: pip install -e ".[explore]". Ctrl-C stops the server.

    Examples:

      gradlab explore --no-browser --port 0 --loss arccon

      gradlab explore --loss met --run runs/simcse_met

      gradlab explore --loss my_losses.py:focal --param gamma=2
    """
    if not 0 <= port <= 65535:
        raise fail(f"--port must be within [0, 65535]; got {port}")
    from gradlab.explore import View, require_extra, view_loss

    # the arguments first (none needs Panel): a misuse says what is wrong with or without the extra
    params = parse_params(param)
    if loss is not None and compose is not None:
        raise fail("give at most one of --loss and --compose")
    text = f"compose:{compose}" if compose is not None else (loss or "infonce")
    view_loss(View(text, params=tuple(params.items())))  # a bad loss: one line, before anything starts
    if run is not None:
        from gradlab.experiments import run_path

        run_path(run)
    require_extra("panel")
    from gradlab.explore import serve

    def ready(url: str) -> None:
        typer.echo(f"gradlab explore: serving {url} (Ctrl-C stops)")

    try:
        serve(port=port, address=address, show=not no_browser, ready=ready, loss=text, params=params, run=run,
              grid=grid, batches=batches, batch_size=batch_size, seed=seed, out=out)
    except KeyboardInterrupt:
        pass  # Ctrl-C: the normal way to stop
    except OSError as exc:
        raise fail(f"cannot serve on {address}:{port}: {exc.strerror or exc}") from None
    typer.echo("gradlab explore: stopped")


def register(app: typer.Typer) -> None:
    app.command(context_settings=CONTEXT)(explore)
