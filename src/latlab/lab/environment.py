"""The environment a run ran in: versions of latlab, GStreamer, the kernel and Python, the
host (``env.json`` of a run directory, schema ``latlab.env/1``)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from typing import Any

import latlab
from latlab.rundir import ENV_SCHEMA


def gstreamer_version() -> str | None:
    """GStreamer version reported by ``gst-launch-1.0 --version`` (None if unavailable)."""
    try:
        out = subprocess.run(
            ["gst-launch-1.0", "--version"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("GStreamer "):
            return line.split()[1]
    return None


def environment() -> dict[str, Any]:
    """What ran the experiment: versions of latlab, GStreamer, kernel, Python; host name."""
    return {
        "schema": ENV_SCHEMA,
        "latlab_version": latlab.__version__,
        "gstreamer_version": gstreamer_version(),
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
