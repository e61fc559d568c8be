"""The error a user's input to ``latlab signal`` raises: shown as one line, never a traceback."""

from __future__ import annotations

from latlab.errors import UserInputError


class SignalError(UserInputError, ValueError):
    """A recording or an option ``latlab signal`` cannot use; the message names the file."""
