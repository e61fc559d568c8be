"""The errors that report a user's mistake: shown as one line, never as a traceback."""

from __future__ import annotations

from latlab.ingest.trace_reader import TraceError
from latlab.tracer import TracerNotBuilt


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [TraceError, TracerNotBuilt, FileNotFoundError]
    try:
        from latlab.lab.runner import RunError
        from latlab.lab.scenario import ScenarioError

        errors += [ScenarioError, RunError]
    except ImportError:  # the lab is optional for analysis-only installs
        pass
    return tuple(errors)


USER_ERRORS = _user_errors()
