"""The crash drill, short (tests/crash_drill.py): SIGKILLs of ``latlab run`` per kind.

The long drill (20 kills per kind, every phase) is ``bash scripts/crash-drill.sh``
(docs/lab.md). Here: each kind of scenario killed once (GStreamer with an
emulated link in each of the three phases), within CI's budget; after each kill, the next
latlab invocation must leave nothing of the dead run, touch nothing else (planted
look-alikes, a second live run), and the dead run's directory must be readable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import crash_drill, uml

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

# The phase of each kill, per kind: every phase for GStreamer with an emulated link, one
# for each other kind (the long drill kills each kind in every phase).
PLAN = {
    "gst": ("starting", "running", "stopping"),
    "srt": ("running",),
    "jack": ("starting",),
    "pulse": ("running",),
    "webrtc": ("running",),
    "sfu": ("stopping",),
}


def report(kills: list[crash_drill.Kill]) -> str:
    return crash_drill.summary(kills) + "".join(
        f"\n{k.kind} #{k.index} ({k.phase_seen}): leftovers {k.leftovers}, touched "
        f"{k.touched}, problems {k.problems}"
        for k in kills
        if not k.ok
    )


@pytest.mark.timeout(900)
def test_killed_runs_leave_nothing_and_stay_readable(tmp_path: Path) -> None:
    kills = crash_drill.drill(list(PLAN), 0, seed=22, work=tmp_path, plan=PLAN)
    assert kills and all(k.ok for k in kills), report(kills)
    ran = {k.kind for k in kills}
    skipped = set(PLAN) - ran - {"bystander"}
    for kind in skipped:  # a program missing here (the drill printed which)
        assert any(shutil_missing(p) for p in crash_drill.KINDS[kind].needs), kind
    assert any(k.status == "incomplete" and k.report_exit == 0 for k in kills), report(kills)


def shutil_missing(program: str) -> bool:
    import shutil

    return shutil.which(program) is None


@pytest.mark.timeout(900)
def test_a_killed_run_over_netem_leaves_nothing_in_a_guest(tmp_path: Path) -> None:
    """The netem link backend, in a User-Mode Linux guest (whose kernel has netem): the
    drill runs inside it (tests/uml; skipped where a guest cannot boot, saying why). It
    measures no time, so it shares the machine with the other end-to-end tests."""
    reason = uml.unavailable()
    if reason:
        pytest.skip(f"a User-Mode Linux guest cannot run here: {reason}")
    kills = crash_drill.drill(["netem"], 1, seed=22, work=tmp_path, phases=("running",))
    assert kills and all(k.ok for k in kills), report(kills)
