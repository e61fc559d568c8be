"""The errors that report a user's mistake: shown as one line, never as a traceback."""

from __future__ import annotations

from latlab.ingest.trace_reader import TraceError
from latlab.lab import LabError, RecordError, RunError, ScenarioError
from latlab.tracer import TracerNotBuilt

USER_ERRORS: tuple[type[BaseException], ...] = (
    TraceError,
    TracerNotBuilt,
    ScenarioError,
    RunError,
    LabError,
    RecordError,
    FileExistsError,
    FileNotFoundError,
)
