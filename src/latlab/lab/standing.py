"""A standing lab for people's own commands: ``latlab lab up / exec / down``.

``lab up SCENARIO`` creates the scenario's hosts and links (no processes) and leaves
them up after the command ends. Its namespaces are named for the standing owner
(``llab-0-HOST``, :data:`~latlab.lab.netns.STANDING_OWNER`). What it created is in its
journal (:mod:`latlab.lab.owner`), marked ``standing`` once the lab is up, so the cleanup
of later runs never removes it (a ``lab up`` killed half-way is cleaned up like any run).
Its state goes to a state file, ``lab.json`` in the state directory:

* ``$LATLAB_STATE_DIR`` if set;
* else ``/run/latlab`` when running as root;
* else ``$XDG_RUNTIME_DIR/latlab`` (or ``~/.cache/latlab``).

``lab exec HOST -- CMD`` runs CMD in that host's namespace (``ip netns exec``,
replacing itself, so stdin/stdout and the exit code are the command's).
``lab down`` stops the processes the lab started (link emulators: SIGTERM so they
complete their logs, then SIGKILL), deletes exactly the namespaces named in the state
file and removes it. Link logs stay in the lab's directory (``--out``, default
``runs/lab-TIME``).
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from latlab import rundir
from latlab.errors import UserInputError
from latlab.lab import owner
from latlab.lab.netns import (
    STANDING_OWNER,
    Lab,
    LabError,
    cleanup_stale,
    delete_namespace,
    list_namespaces,
    namespace_name,
    remove_standing,
)
from latlab.lab.scenario import load_scenario
from latlab.lab.signals import signals_deferred, sigterm_raises

STATE_SCHEMA = "latlab.lab/1"
STOP_GRACE_S = 3.0


class StandingLabError(UserInputError):
    """A standing-lab command that cannot be done as asked (no lab is up, one is already
    up, an unknown host, a missing command): one line, exit 2."""


def state_dir() -> Path:
    """Directory of the state file (``LATLAB_STATE_DIR`` overrides; see the module
    docstring)."""
    override = os.environ.get("LATLAB_STATE_DIR")
    return Path(override) if override else owner.runtime_dir()


def state_path() -> Path:
    """The state file of the standing lab."""
    return state_dir() / rundir.LAB_STATE_FILE


def read_state() -> dict[str, Any] | None:
    """The standing lab's state, or None when no lab is up (a state whose namespaces
    are all gone, e.g. after a reboot, is removed)."""
    path = state_path()
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StandingLabError(f"{path}: unreadable lab state ({exc}); remove it") from None
    existing = set(list_namespaces())
    if not any(ns in existing for ns in state.get("namespaces", [])):
        path.unlink(missing_ok=True)
        return None
    return state


def require_state() -> dict[str, Any]:
    """The standing lab's state; LabError when none is up."""
    state = read_state()
    if state is None:
        raise StandingLabError("no lab is up (start one: latlab lab up SCENARIO)")
    return state


def lab_up(scenario_file: Path, out_dir: Path | None = None) -> dict[str, Any]:
    """Create the scenario's hosts and links and leave them up; returns the state."""
    current = read_state()
    if current is not None:
        raise StandingLabError(
            f"a lab is already up ({current['scenario']}, hosts: "
            f"{', '.join(current['hosts'])}); remove it first: latlab lab down"
        )
    scenario = load_scenario(scenario_file, processes_required=False)
    planted = [host.name for host in scenario.hosts if host.clock is not None]
    if planted:  # `lab exec` and `lab down` would not keep or free their time namespaces
        raise StandingLabError(
            f"{scenario_file}: hosts {', '.join(planted)} have their own clocks (clock = ...): "
            "run the scenario with latlab run; a standing lab keeps the machine's clock"
        )
    out_dir = out_dir or Path("runs") / f"lab-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir.mkdir(parents=True, exist_ok=True)
    cleanup_stale()
    lab = _make_lab(scenario, out_dir)
    with sigterm_raises():
        lab.up()
        try:
            _refuse_netem_schedules(lab)
            state = _state(lab, scenario_file, scenario.name, out_dir)
            state["journal"] = str(owner.journal().path)
            state_dir().mkdir(parents=True, exist_ok=True)
            rundir.write_json(state_path(), state)
            rundir.write_json(out_dir / rundir.LAB_STATE_FILE, state)
            owner.release_standing(state_path())  # from now on only lab down removes it
        except BaseException:
            lab.down()
            raise
    atexit.unregister(lab.down)  # the lab outlives this command
    return state


def _refuse_netem_schedules(lab: Lab) -> None:
    """LabError for a netem link with a schedule: once ``lab up`` returns, nothing is left
    to apply the changes (latlab-linkemu applies its own)."""
    for index, link in lab.netem_links.items():
        if link.config.get("schedule"):
            raise StandingLabError(
                f"links[{index}] ({link.name}): a standing lab cannot follow a schedule "
                'through netem; use backend = "latlab-linkemu" for this link'
            )


def _make_lab(scenario: Any, out_dir: Path) -> Lab:
    """``Lab.from_scenario`` owned by the standing owner, logging links to ``out_dir``."""
    accepted = inspect.signature(Lab.from_scenario).parameters
    options: dict[str, Any] = {"owner_pid": STANDING_OWNER}
    if "run_dir" in accepted:
        options["run_dir"] = out_dir
    if "captures" in accepted:  # nothing would stop a capture once `lab up` returned
        options["captures"] = False
    return Lab.from_scenario(scenario, **options)


def _lab_pids(lab: Lab) -> list[dict[str, Any]]:
    """Processes the lab started that must outlive this command (link emulators)."""
    out = []
    for key, emulator in getattr(lab, "emulators", {}).items():
        child = getattr(emulator, "child", None)
        pid = getattr(child, "pid", None)
        if pid is not None:
            out.append({"what": f"link {key} emulator", "pid": pid, "cmdline": _cmdline(pid)})
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _state(lab: Lab, scenario_file: Path, name: str, out_dir: Path) -> dict[str, Any]:
    prefix = namespace_name(STANDING_OWNER, "")
    described = lab.describe()
    return {
        "schema": STATE_SCHEMA,
        "name": name,
        "scenario": str(scenario_file),
        "owner": STANDING_OWNER,
        "created_by_pid": os.getpid(),
        "created_at": rundir.Instant.now().iso,
        "out_dir": str(out_dir.resolve()),
        "namespaces": sorted(n for n in list_namespaces() if n.startswith(prefix)),
        "hosts": described["hosts"],
        "links": described["links"],
        "processes": _lab_pids(lab),
    }


def exec_argv(host: str, command: list[str]) -> list[str]:
    """``ip netns exec NS COMMAND`` for ``host`` of the standing lab."""
    state = require_state()
    hosts = state["hosts"]
    if host not in hosts:
        raise StandingLabError(f"unknown host '{host}' (hosts: {', '.join(sorted(hosts))})")
    if not command:
        raise StandingLabError(
            "give the command to run after --, e.g. latlab lab exec HOST -- ping ..."
        )
    return ["ip", "netns", "exec", hosts[host]["namespace"], *command]


def host_cpus(host: str) -> list[int] | None:
    """The CPUs ``host`` of the standing lab runs its programs on (None: any)."""
    return require_state()["hosts"].get(host, {}).get("cpus")


def lab_down() -> dict[str, Any]:
    """Stop the lab's processes, delete its namespaces, remove the state; returns the state."""
    state = require_state()
    journal = Path(state["journal"]) if state.get("journal") else None
    with signals_deferred():
        stopped = [_stop_process(p) for p in _journal_processes(journal)]
        errors = []
        if journal is not None:
            remove_standing(journal)
        for namespace in reversed(state["namespaces"]):  # a state without a journal
            try:
                delete_namespace(namespace)
            except LabError as exc:
                errors.append(str(exc))
        state_path().unlink(missing_ok=True)
    out_dir = Path(state["out_dir"])
    if out_dir.is_dir():
        final = {**state, "stopped": stopped, "down_at": rundir.Instant.now().iso}
        rundir.write_json(out_dir / rundir.LAB_STATE_FILE, final)
    if errors:
        raise LabError(errors[0])
    return state


def _journal_processes(journal: Path | None) -> list[dict[str, Any]]:
    """The processes the standing lab's journal lists (its link emulators)."""
    if journal is None:
        return []
    return [p for p in owner.Entries.read(journal).items["process"] if isinstance(p, dict)]


def _stop_process(entry: dict[str, Any]) -> str:
    """SIGTERM a recorded process (if its pid is still that process: the start time the
    journal recorded), then SIGKILL."""
    pid, start = entry.get("pid"), entry.get("start")
    if not isinstance(pid, int) or not owner.same_process(pid, start):
        return "gone"
    for signum, how in ((signal.SIGTERM, "sigterm"), (signal.SIGKILL, "sigkill")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            if not owner.same_process(pid, start):
                return how
            time.sleep(0.01)  # polling the process's state, bounded by the deadline
    return "sigkill"
