"""Locate the latlab GStreamer tracer plugin and build the environment that loads it."""

from __future__ import annotations

import os
from pathlib import Path

from latlab.errors import EnvironmentProblem

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = REPO_ROOT / "target" / "release"  # the Cargo workspace's build: every binary
PLUGIN_DIR = BUILD_DIR
PLUGIN_FILE = PLUGIN_DIR / "libgstlatlab.so"


class TracerNotBuilt(EnvironmentProblem, RuntimeError):
    """The tracer plugin has not been built (run the set-up command from the README)."""


def plugin_dir() -> Path:
    """Directory holding libgstlatlab.so; LATLAB_PLUGIN_DIR overrides the in-repo build."""
    override = os.environ.get("LATLAB_PLUGIN_DIR")
    directory = Path(override) if override else PLUGIN_DIR
    if not (directory / "libgstlatlab.so").is_file():
        raise TracerNotBuilt(
            f"{directory / 'libgstlatlab.so'}: tracer plugin not built (run: cargo build --release)"
        )
    return directory


DEBUG_CATEGORY = "latlab"  # the tracer's GStreamer debug category
WARNING_LEVEL = 2  # GST_LEVEL_WARNING: warnings and errors


def is_built() -> bool:
    """Whether the tracer plugin is there to be loaded."""
    try:
        plugin_dir()
    except TracerNotBuilt:
        return False
    return True


def tracer_env(trace_dir: Path | str, process: str | None = None) -> dict[str, str]:
    """Environment variables that load the tracer into any GStreamer application.

    Traces land in ``trace_dir`` as ``PROCESS-PID.lltrace``. The tracer logs through the
    GStreamer debug category ``latlab``; its warnings and errors (a trace it cannot write,
    events it dropped) are shown unless ``GST_DEBUG`` already sets that category.
    """
    env = {
        "GST_PLUGIN_PATH": _prepend_path(str(plugin_dir()), os.environ.get("GST_PLUGIN_PATH")),
        "GST_TRACERS": _add_tracer(os.environ.get("GST_TRACERS")),
        "GST_DEBUG": _with_warnings(os.environ.get("GST_DEBUG")),
        "LATLAB_TRACE_DIR": str(Path(trace_dir).resolve()),
    }
    if process:
        env["LATLAB_PROCESS"] = process
    return env


def _prepend_path(first: str, rest: str | None) -> str:
    parts = [first] + [p for p in (rest or "").split(os.pathsep) if p and p != first]
    return os.pathsep.join(parts)


def _with_warnings(existing: str | None) -> str:
    """``GST_DEBUG`` with the tracer's category at WARNING unless it is already set."""
    entries = [e for e in (existing or "").split(",") if e]
    if any(e.split(":")[0] == "latlab" for e in entries):
        return ",".join(entries)
    return ",".join([*entries, f"{DEBUG_CATEGORY}:{WARNING_LEVEL}"])


def _add_tracer(existing: str | None) -> str:
    tracers = [t for t in (existing or "").split(";") if t]
    if not any(t.split("(")[0] == "latlab" for t in tracers):
        tracers.append("latlab")
    return ";".join(tracers)
