"""The lab: scenarios, hosts as network namespaces, runs of GStreamer pipelines, recording.

Public API:

* :func:`load_scenario`, :func:`parse_scenario`, :class:`Scenario`, :class:`ScenarioError`
* :class:`Lab`, :func:`cleanup_stale`, :class:`LabError`
* :func:`run_scenario`, :class:`RunResult`, :class:`RunError`
* :func:`record`, :func:`print_env`, :class:`RecordError`
"""

from latlab.lab.netns import Lab, LabError, cleanup_stale
from latlab.lab.record import RecordError, print_env, record
from latlab.lab.runner import RunError, RunResult, run_scenario
from latlab.lab.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from latlab.lab.signals import Terminated

__all__ = [
    "Lab",
    "LabError",
    "RecordError",
    "RunError",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "Terminated",
    "cleanup_stale",
    "load_scenario",
    "parse_scenario",
    "print_env",
    "record",
    "run_scenario",
]
