"""latlab's errors and the exit status of each: one base type, a few kinds, one place.

Every error latlab reports to a user is a :class:`LatlabError`: ``str()`` is one line that
names the file or thing at fault and the problem; ``exit_code`` is what the command line
exits with (docs/exit-codes.md lists them). The command line prints such an error as
``latlab: error: LINE`` and never a traceback; any other exception is a bug in latlab
(exit 70, a traceback only with ``--debug``).

This module sits at the bottom of the package: it imports nothing of latlab's.
"""

from __future__ import annotations

OK = 0
FAILED = 1  # the measurement failed, or a budget (latlab check) was exceeded
USAGE = 2  # a mistake in what the user gave: arguments, scenario, run directory, files
ENVIRONMENT = 3  # the machine cannot do it: a missing program or build, no root, no netem
INTERNAL = 70  # a bug in latlab (sysexits' EX_SOFTWARE)
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
TERMINATED = 143  # SIGTERM (128 + SIGTERM)

EXIT_CODES: dict[int, str] = {
    OK: "success",
    FAILED: "the measurement failed (a process, the media, the black box), or latlab check "
    "found a budget exceeded",
    USAGE: "a mistake in what was given: arguments, a scenario, a run directory, a trace or "
    "other file (the message names it)",
    ENVIRONMENT: "the machine cannot do it: a program or build is missing, root is needed, "
    "the kernel lacks a feature",
    INTERNAL: "a bug in latlab: please report it with the output of --debug",
    INTERRUPTED: "interrupted (Ctrl-C); what was measured so far is kept",
    TERMINATED: "terminated (SIGTERM); what was measured so far is kept",
}


class LatlabError(Exception):
    """An error latlab reports to its user: ``str()`` is one line; ``exit_code`` the CLI's
    exit status for it."""

    exit_code: int = FAILED


class UserInputError(LatlabError):
    """A mistake in what the user gave latlab: arguments, a scenario, a run directory, a
    trace or other input file (the message names it)."""

    exit_code = USAGE


class EnvironmentProblem(LatlabError):
    """The machine cannot do what was asked: a program or build is missing, root is
    needed, the kernel lacks a feature."""

    exit_code = ENVIRONMENT


class MeasurementError(LatlabError):
    """A measurement failed: a process did not start or died, no media flowed, a rig or a
    device failed. What was measured so far is kept."""

    exit_code = FAILED


class DirectoryNotEmpty(UserInputError, FileExistsError):
    """A run or sweep directory to write exists and holds something: latlab never writes
    over a measurement."""


class InternalError(LatlabError):
    """latlab found itself in a state it should never be in (a bug)."""

    exit_code = INTERNAL
