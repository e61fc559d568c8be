"""SFUs as lab hosts (``[sfus.NAME]``), started and stopped by latlab in a host's namespace.

:mod:`latlab.lab.sfu.base` holds what every server shares (configuration in ``sfus/NAME/``,
start, readiness probe, watch, stop, run.json); each server kind is one module with one
:class:`~latlab.lab.sfu.base.SfuServer` subclass, registered in :data:`SERVERS` under the
scenario's ``server`` value: Janus's videoroom (:mod:`latlab.lab.sfu.janus`), LiveKit
(:mod:`latlab.lab.sfu.livekit`) and latlab's own latlab-sfu (:mod:`latlab.lab.sfu.latlab`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from latlab.lab.scenario import Sfu
from latlab.lab.sfu.base import SfuError, SfuServer, Wrap, links_running, listening_sockets
from latlab.lab.sfu.janus import ROOM, VIDEOROOM, JanusServer
from latlab.lab.sfu.latlab import LatlabServer
from latlab.lab.sfu.livekit import LiveKitServer

SERVERS: dict[str, type[SfuServer]] = {
    JanusServer.kind: JanusServer,
    LiveKitServer.kind: LiveKitServer,
    LatlabServer.kind: LatlabServer,
}

__all__ = ["ROOM", "SERVERS", "VIDEOROOM", "JanusServer", "LatlabServer", "LiveKitServer",
           "SfuError", "SfuServer", "links_running", "listening_sockets", "sfu_server"]  # fmt: skip


def sfu_server(
    spec: Sfu,
    namespace: str,
    addrs: Sequence[str],
    run_dir: Path,
    exited: threading.Event,
    wrap: Wrap | None = None,
) -> SfuServer:
    """The (not yet started) server of ``spec`` in ``namespace``, reached at ``addrs[0]``."""
    return SERVERS[spec.server](spec, namespace, addrs, run_dir, exited, wrap)
