"""User-facing errors.

Anything a user can get wrong (a path, a flag, a malformed row) raises ``TandemError``
with a one-line message that names the bad input. The CLI prints it without a traceback
and exits with status 2; library callers can catch it like any ``ValueError``.
"""


class TandemError(ValueError):
    """Bad input from the user; the message is one line and names the input."""
