"""UserError: a problem the user can fix, shown as one line without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment: the message is a sentence that says what to do.

    The CLI prints ``ddpdoctor: <message>`` and exits with ``exit_code``.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
