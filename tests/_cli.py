"""Running the CLI in-process, and the one-line-error contract, for the CLI tests."""

from gradlab_cli.app import app
from typer.testing import CliRunner

runner = CliRunner()


def run(*args):
    """``gradlab ARGS...`` in-process; arguments are turned into strings."""
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result, code=2):
    """The stderr line of a failed command: exit ``code``, one line starting "Error:", no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert err.startswith("Error:") and "\n" not in err, err
    assert "Traceback" not in result.output
    return err
