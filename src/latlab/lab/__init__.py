"""The lab: scenarios, hosts as network namespaces, runs of GStreamer pipelines, recording.

Public API:

* :func:`load_scenario`, :func:`parse_scenario`, :class:`Scenario`, :class:`ScenarioError`
* :class:`Lab`, :func:`cleanup_stale`, :class:`LabError`
* :func:`run_scenario`, :class:`RunResult`, :class:`RunError`
* :func:`record`, :func:`print_env`, :class:`RecordError`
"""

from __future__ import annotations

import importlib
from typing import Any

# The names, imported on first use: importing one module of the lab (the scenario model,
# the ownership journal) must not load the runner, the browsers and scipy with it (every
# CLI command imports the scenario model: 0.41 s before, most of a `latlab --help`).
_EXPORTS = {
    "Lab": "netns",
    "LabError": "netns",
    "cleanup_stale": "netns",
    "RecordError": "record",
    "print_env": "record",
    "record": "record",
    "RunError": "runner",
    "RunResult": "runner",
    "run_scenario": "runner",
    "Scenario": "scenario",
    "ScenarioError": "scenario",
    "load_scenario": "scenario",
    "parse_scenario": "scenario",
    "Terminated": "signals",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'latlab.lab' has no attribute {name!r}")
    return getattr(importlib.import_module(f"latlab.lab.{module}"), name)
