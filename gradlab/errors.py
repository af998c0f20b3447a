"""An error as one line of text: how gradlab shows an exception to a person.

The conventions of the architecture page: a library error is one line that names the bad value.
``one_line`` is that line for an exception gradlab did not raise itself: the CLI's stderr line, the
error a training run records, a user's loss that failed its probe. A leaf: it imports nothing.
"""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(exc: BaseException, *, typed: bool = True, first_line: bool = False) -> str:
    """``exc`` as one line: ``"Type: message"``, each run of whitespace (newlines too) one space.

    Args:
      exc: the exception.
      typed: False gives the message alone (the type's name when the message is empty).
      first_line: keep only the message's first line (user code whose errors run on for pages,
        such as a JAX tracing error).

    Examples:
      >>> one_line(ValueError("tau must be > 0;\\n  got -1"))
      'ValueError: tau must be > 0; got -1'
      >>> one_line(ValueError("tau must be > 0;\\n  got -1"), first_line=True)
      'ValueError: tau must be > 0;'
      >>> one_line(KeyError("tau"), typed=False), one_line(RuntimeError(), typed=False)
      ("'tau'", 'RuntimeError')
    """
    text = str(exc).strip()
    if first_line:
        text = text.splitlines()[0] if text else ""
    text = f"{type(exc).__name__}: {text}" if typed else (text or type(exc).__name__)
    return " ".join(text.split())
