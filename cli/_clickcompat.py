"""The click exception classes typer actually raises (typer >= 0.2x vendors click as typer._click)."""

from __future__ import annotations

try:
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
    from typer._click.globals import get_current_context
    from typer._click.utils import echo
    from typer.exceptions import Abort, Exit
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import ClickException, UsageError, echo, get_current_context
    from click.exceptions import Abort, Exit, NoArgsIsHelpError

__all__ = ["Abort", "ClickException", "Exit", "NoArgsIsHelpError", "UsageError", "echo", "get_current_context"]
