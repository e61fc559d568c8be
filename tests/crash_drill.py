"""The crash drill: ``latlab run`` killed with SIGKILL at random moments, then cleaned up.

For each kind of scenario, each kill: start ``./latlab run``, follow what it reports
(``all processes ready``, ``stopping``), SIGKILL the runner at a random moment of the
phase drawn (starting, running, stopping), then let the next latlab invocation clean up
(``latlab lab cleanup``, or for every other kill a short ``latlab run`` of its own: both
clean first) and check:

* nothing of the dead run is left: no namespace ``llab-<pid>-*``, no process it started
  (its descendants at the kill, by pid and start time, and any process naming its
  namespaces or its directory), no JACK file in /dev/shm, no private directory, no
  journal;
* nothing else was touched: planted look-alikes (a namespace named like a dead latlab's,
  one named like a standing lab's, a process whose command line names a dead latlab) and
  a second, live latlab run (the bystander) are all still there;
* the dead run's directory is readable: run.json says ``incomplete`` (or how it ended,
  if the kill came after it was written), and ``latlab report`` analyses what was
  recorded or says in one line why it cannot (never a traceback).

``python -m tests.crash_drill --kinds gst,jack --kills 20`` runs it (as root) and prints a
line per kill and a summary (``scripts/crash-drill.sh``); ``tests/test_crash_drill.py``
runs a few kills per kind in CI. Exit status 1 if any kill left something or was
unreadable.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.conftest import sfu_and_load_host

REPO = Path(__file__).resolve().parents[1]
LATLAB = str(REPO / "latlab")
READY = "all processes ready"
STOPPING = ": stopping"
PHASES = ("starting", "running", "stopping")
WAIT_S = 120.0  # the longest a run may take to say ready or stopping (Chromium, Janus)
SLOWER = 1.0  # how much slower things run here (a UML guest: every syscall through ptrace)
CLEANUP_TIMEOUT_S = 120.0

# A kind: the scenario (a shipped file, or TOML text), the run's duration, and what its
# run must have (a program to skip without).
SFU_LOAD = (
    sfu_and_load_host("drill-sfu", "janus", cost=True)
    + """[loads.crowd]
sfu = "janus"
host = "load"
publishers = 1
subscribers = 2
video_kbps = 300
"""
)
TINY = """name = "drill-tiny"
duration_s = 1
[hosts.h]
[processes.p]
host = "h"
pipeline = "audiotestsrc is-live=true ! fakesink"
"""


@dataclass(frozen=True)
class Kind:
    name: str
    scenario: str  # a path under scenarios/, or TOML text
    duration_s: float
    needs: tuple[str, ...] = ()
    netem: bool = False  # run inside a User-Mode Linux guest (a kernel with netem)


KINDS = {
    "gst": Kind("gst", "scenarios/l16-impaired.toml", 3.0),
    "srt": Kind("srt", "scenarios/srt-720p30.toml", 3.0),
    "webrtc": Kind("webrtc", "scenarios/webrtc-call.toml", 4.0, ("chromium",)),
    "jack": Kind("jack", "scenarios/l16-jack.toml", 3.0, ("jackd",)),
    "pulse": Kind("pulse", "scenarios/l16-pulse.toml", 3.0, ("pulseaudio",)),
    "sfu": Kind("sfu", SFU_LOAD, 4.0, ("janus",)),
    "netem": Kind("netem", "scenarios/l16-impaired.toml", 3.0, ("linux.uml",), netem=True),
}


def scenario_file(kind: Kind, work: Path) -> Path:
    """The kind's scenario as a file (for netem: its links through netem)."""
    if "\n" in kind.scenario:
        text = kind.scenario
    else:
        text = (REPO / kind.scenario).read_text(encoding="utf-8")
    if kind.netem:
        text = text.replace("loss_pct = 0.5", 'loss_pct = 0.5\nbackend = "netem"', 1)
    path = work / f"{kind.name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class Kill:
    """What one kill did and found."""

    kind: str
    index: int
    phase_drawn: str
    phase_seen: str = ""  # what the run had reported when it was killed
    delay_s: float = 0.0  # after the phase began
    runner_pid: int = 0
    run_dir: str = ""
    cleaned_by: str = ""
    cleanup_s: float = 0.0
    leftovers: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)  # foreign things that went missing
    status: str | None = None  # run.json's, after the cleanup
    report_exit: int | None = None
    report_line: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.leftovers or self.touched or self.problems)


class Follower:
    """A ``latlab run`` started with its output followed line by line."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log.open("w", encoding="utf-8")
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log,
                                      text=True, cwd=REPO, start_new_session=True)  # fmt: skip
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.log.write(line)
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.lines.append("<eof>")
            self.changed.notify_all()

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for(self, text: str, timeout: float) -> bool:
        """Wait until a line holds ``text`` (False: the run ended or the time ran out)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not self.saw(text):
                if self.saw("<eof>") or time.monotonic() > deadline:
                    return False
                self.changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
        return True

    def phase(self) -> str:
        if self.saw(STOPPING):
            return "stopping"
        return "running" if self.saw(READY) else "starting"


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time, command line) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[19]), cmdline)
    return table


def descendants(pid: int) -> dict[int, tuple[int, str]]:
    """pid -> (start time, command line) of every descendant of ``pid`` now."""
    table = process_table()
    found: dict[int, tuple[int, str]] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start, cmd) in table.items():
            if ppid == parent and child not in found:
                found[child] = (start, cmd)
                frontier.append(child)
    return found


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def leftovers(pid: int, run_dir: Path, before: dict[int, tuple[int, str]],
              token: str | None) -> list[str]:  # fmt: skip
    """What of the dead run (runner ``pid``) is still there."""
    tag = f"llab-{pid}-"
    found = sorted(ns for ns in namespaces() if ns.startswith(tag))
    table = process_table()
    for child, (start, cmd) in before.items():
        if child in table and table[child][1] == start:
            found.append(f"process {child}: {cmd[:100]}")
    for proc, (_, _, cmd) in table.items():
        if (tag in cmd or str(run_dir) in cmd) and proc not in before and proc != os.getpid():
            found.append(f"process {proc}: {cmd[:100]}")
    shm = Path("/dev/shm")
    found += [str(p) for p in shm.iterdir() if tag in p.name] if shm.is_dir() else []
    from latlab.lab.jackfiles import registrations

    found += [f"JACK registry slot {n}" for n in registrations() if n.startswith(tag)]
    if token:
        from latlab.lab import owner

        for path in (owner.journal_dir() / f"{token}{owner.JOURNAL_SUFFIX}",
                     owner.journal_dir().parent / "tmp" / token):  # fmt: skip
            if path.exists():
                found.append(str(path))
    return found


@dataclass
class Foreign:
    """Things a latlab cleanup must never touch: planted look-alikes and a live run."""

    work: Path
    dead: int = 0
    names: list[str] = field(default_factory=list)
    planted: subprocess.Popen[bytes] | None = None
    bystander: Follower | None = None
    bystander_ns: list[str] = field(default_factory=list)

    def plant(self) -> None:
        self.planted = subprocess.Popen(["bash", "-c", "exec -a llab-drill-foreign sleep 86400"])
        # Named like a live process's lab (the planted one: no latlab's), like a standing
        # lab's, and like nothing of latlab's; and (plant_dead) like a dead latlab's.
        self.names = [f"llab-{self.planted.pid}-drill", "llab-0-drillx", "drill-foreign"]
        for name in self.names:
            subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
        argv = [LATLAB, "run", str(REPO / "scenarios" / "l16-basic.toml"),
                "--out", str(self.work / "bystander"), "--duration", "86400"]  # fmt: skip
        self.bystander = Follower(argv, self.work / "bystander.log")
        if not self.bystander.wait_for(READY, WAIT_S):
            raise RuntimeError("the bystander run did not get ready: see bystander.log")
        pid = self.bystander.popen.pid
        self.bystander_ns = [f"llab-{pid}-tx", f"llab-{pid}-rx"]

    def plant_dead(self) -> None:
        """A namespace named like a dead latlab process's, just before a cleanup (older
        latlab versions, which went by whether the pid in a name was alive, would remove
        it: on a machine where one runs beside this drill, it could go at any time)."""
        child = subprocess.Popen(["true"])
        child.wait(timeout=10)
        self.dead = child.pid
        name = f"llab-{self.dead}-drill"
        subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
        self.names.append(name)

    def missing(self) -> list[str]:
        """Foreign things that are gone."""
        present = namespaces()
        gone = [f"namespace {n}" for n in self.names + self.bystander_ns if n not in present]
        if self.planted is not None and self.planted.poll() is not None:
            gone.append("the planted process")
        if self.bystander is not None and self.bystander.popen.poll() is not None:
            gone.append("the bystander run")
        return gone

    def drop_dead(self) -> None:
        name = f"llab-{self.dead}-drill"
        if name in self.names:
            self.names.remove(name)
            subprocess.run(["ip", "netns", "del", name], timeout=30, check=False,
                           capture_output=True)  # fmt: skip

    def remove(self) -> str | None:
        """Stop the bystander (SIGINT: it must finish as interrupted) and the plants;
        returns a problem, if any."""
        problem = None
        if self.bystander is not None and self.bystander.popen.poll() is None:
            self.bystander.popen.send_signal(signal.SIGINT)
            try:
                self.bystander.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.bystander.popen.kill()
                problem = "the bystander did not stop on SIGINT"
            run = json.loads((self.work / "bystander" / "run.json").read_text())
            if run.get("status") != "interrupted":
                problem = f"the bystander ended {run.get('status')}: {run.get('error')}"
        if self.planted is not None:
            self.planted.kill()
            self.planted.wait(timeout=10)
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], timeout=30, check=False,
                           capture_output=True)  # fmt: skip
        return problem


def one_kill(kind: Kind, index: int, phase: str, scenario: Path, work: Path,
             foreign: Foreign, rng: random.Random) -> Kill:  # fmt: skip
    run_dir = work / f"{kind.name}-{index}"
    kill = Kill(kind.name, index, phase, run_dir=str(run_dir))
    argv = [LATLAB, "run", str(scenario), "--out", str(run_dir),
            "--duration", str(kind.duration_s)]  # fmt: skip
    run = Follower(argv, work / f"{kind.name}-{index}.log")
    kill.runner_pid = pid = run.popen.pid
    if phase == "starting":  # from run.json's first write (status running): lab set-up
        _wait_for_file(run_dir / "run.json", run, WAIT_S)
        kill.delay_s = rng.uniform(0.0, 0.8 * SLOWER)
        run.wait_for(READY, kill.delay_s)
    elif phase == "running":
        if not run.wait_for(READY, WAIT_S):
            kill.problems.append(f"never ready: {run.lines[-3:]}")
        kill.delay_s = rng.uniform(0.0, kind.duration_s)
        run.wait_for(STOPPING, kill.delay_s)
    else:
        if not run.wait_for(STOPPING, WAIT_S + kind.duration_s):
            kill.problems.append(f"never stopping: {run.lines[-3:]}")
        kill.delay_s = rng.uniform(0.0, 0.5)
        run.wait_for("<eof>", kill.delay_s)
    kill.phase_seen = run.phase() if run.popen.poll() is None else "ended"
    before = descendants(pid)
    run.popen.send_signal(signal.SIGKILL)  # not if the run ended (and was reaped) first
    run.popen.wait(timeout=30)
    run.reader.join(timeout=30)
    token = _journal_token(run_dir)
    foreign.plant_dead()
    started = time.monotonic()
    try:
        kill.cleaned_by = clean_up(index, work / f"{kind.name}-{index}-clean")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        kill.problems.append(str(exc))
    kill.cleanup_s = round(time.monotonic() - started, 2)
    kill.leftovers = leftovers(pid, run_dir, before, token)
    kill.touched = foreign.missing()
    foreign.drop_dead()
    check_readable(kill, run_dir)
    return kill


def _wait_for_file(path: Path, run: Follower, timeout: float) -> None:
    """Wait until ``path`` exists (or the run ended, or the time ran out)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and run.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # polling for a file the run writes, bounded by the deadline


def _journal_token(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "run.json").read_text())["owner"]["journal"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clean_up(index: int, work: Path) -> str:
    """The next latlab invocation: ``lab cleanup``, or (odd kills) a short run (its run
    directory ``work``)."""
    if index % 2 == 0:
        result = subprocess.run([LATLAB, "lab", "cleanup"], capture_output=True, text=True,
                                timeout=CLEANUP_TIMEOUT_S, cwd=REPO)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"latlab lab cleanup failed: {result.stderr.strip()}")
        return "latlab lab cleanup"
    tiny = work.with_suffix(".toml")
    tiny.write_text(TINY, encoding="utf-8")
    out = work
    result = subprocess.run([LATLAB, "run", str(tiny), "--out", str(out)], capture_output=True,
                            text=True, timeout=CLEANUP_TIMEOUT_S, cwd=REPO)  # fmt: skip
    if result.returncode not in (0, 1) or "Traceback" in result.stderr:  # it cleaned first
        raise RuntimeError(f"the cleaning run failed: {result.stderr.strip()[-300:]}")
    return "latlab run (another scenario)"


def check_readable(kill: Kill, run_dir: Path) -> None:
    """run.json says how the run ended; latlab report reads it or says why in one line."""
    if not run_dir.exists():
        kill.status = "(killed before the run directory existed)"
        return
    try:
        run = json.loads((run_dir / "run.json").read_text())
        kill.status = run.get("status")
    except (OSError, ValueError) as exc:
        kill.problems.append(f"run.json unreadable: {exc}")
        return
    if kill.status not in ("incomplete", "ok", "failed", "interrupted"):
        kill.problems.append(f"run.json status {kill.status!r} after the cleanup")
    report = subprocess.run([LATLAB, "report", str(run_dir)], capture_output=True, text=True,
                            timeout=CLEANUP_TIMEOUT_S, cwd=REPO)  # fmt: skip
    kill.report_exit = report.returncode
    lines = [line for line in report.stderr.splitlines() if line.strip()]
    kill.report_line = lines[-1][:200] if lines else ""
    if report.returncode not in (0, 1, 2) or "Traceback" in report.stderr:
        kill.problems.append(f"latlab report exited {report.returncode}: {kill.report_line}")
    elif report.returncode != 0 and len(lines) != 1:
        kill.problems.append(f"latlab report: {len(lines)} lines of error")


def drill(kinds: list[str], kills: int, seed: int, work: Path,
          phases: tuple[str, ...] = PHASES,
          plan: dict[str, tuple[str, ...]] | None = None) -> list[Kill]:  # fmt: skip
    """Run the drill on this machine (netem kinds inside a UML guest); returns every kill.

    ``kills`` per kind, the first ones in each of ``phases``, then phases at random; or,
    with ``plan``, exactly the phases it lists for each kind."""
    import shutil

    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    local = [k for k in kinds if not KINDS[k].netem]
    results: list[Kill] = []
    if local:
        foreign = Foreign(work / "foreign")
        foreign.work.mkdir(exist_ok=True)
        foreign.plant()
        try:
            for name in local:
                kind = KINDS[name]
                missing = [p for p in kind.needs if shutil.which(p) is None]
                if missing:
                    print(f"{name}: skipped ({', '.join(missing)} not installed)", flush=True)
                    continue
                scenario = scenario_file(kind, work)
                drawn = [phases[i] if i < len(phases) else rng.choice(phases)
                         for i in range(kills)]  # fmt: skip
                for i, phase in enumerate(plan[name] if plan else drawn):
                    kill = one_kill(kind, i, phase, scenario, work, foreign, rng)
                    print(json.dumps(asdict(kill)), flush=True)
                    results.append(kill)
        finally:
            problem = foreign.remove()
            if problem:
                results.append(Kill("bystander", 0, "", problems=[problem]))
    for name in [k for k in kinds if KINDS[k].netem]:
        results += drill_in_uml(KINDS[name], kills, seed, work, phases)
    return results


def drill_in_uml(
    kind: Kind, kills: int, seed: int, work: Path, phases: tuple[str, ...] = PHASES
) -> list[Kill]:
    """The drill of a netem kind inside a User-Mode Linux guest (whose kernel has netem):
    the guest runs this module with the kind's link on netem and reports its kills."""
    from tests import uml

    reason = uml.unavailable()
    if reason:
        print(f"{kind.name}: skipped (a User-Mode Linux guest cannot run here: {reason})")
        return []
    out = work.resolve() / "uml"
    out.mkdir(exist_ok=True)
    command = (
        f"{sys.executable} -m tests.crash_drill --kinds {kind.name}-guest "
        f"--kills {kills} --seed {seed} --work {out} --json {out / 'kills.json'} "
        f"--phases {','.join(phases)}"
    )
    console = uml.boot(out, command, timeout=300 + 120 * kills)  # fmt: skip
    (out / "console.txt").write_text(console, encoding="utf-8")  # the guest's whole story
    try:
        found = json.loads((out / "kills.json").read_text())
    except (OSError, ValueError):
        why = f"{uml.failure_reason(console)} (console: {out / 'console.txt'})"
        return [Kill(kind.name, 0, "", problems=[f"the guest wrote no results: {why}"])]
    return [Kill(**k) for k in found]


def summary(kills: list[Kill]) -> str:
    lines = ["kind     kills  starting running stopping  left-over touched unreadable  cleanup s"]
    for kind in dict.fromkeys(k.kind for k in kills):
        mine = [k for k in kills if k.kind == kind]
        seen = {p: sum(k.phase_seen == p for k in mine) for p in PHASES}
        cleanup = [k.cleanup_s for k in mine]
        lines.append(
            f"{kind:8} {len(mine):5}  {seen['starting']:8} {seen['running']:7} "
            f"{seen['stopping']:8}  {sum(bool(k.leftovers) for k in mine):9} "
            f"{sum(bool(k.touched) for k in mine):7} "
            f"{sum(bool(k.problems) for k in mine):10}  "
            f"{max(cleanup, default=0):9.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    ap.add_argument("--kills", type=int, default=20, help="kills per kind")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--work", type=Path, default=Path("runs") / f"crash-drill-{int(time.time())}")
    ap.add_argument("--json", type=Path, help="write every kill here as JSON")
    ap.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="phases to kill in (the first kills take one each, then at random)",
    )
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    guest = [k for k in kinds if k.endswith("-guest")]
    if guest:  # inside the UML guest: the kind's netem scenario, run locally
        global SLOWER, WAIT_S
        SLOWER, WAIT_S = 5.0, 600.0
        for k in guest:
            base = KINDS[k.removesuffix("-guest")]
            KINDS[k] = Kind(k, _netem_text(base), base.duration_s)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kinds {unknown} (known: {', '.join(KINDS)})")
    print(f"crash drill: kinds {','.join(kinds)}, {args.kills} kills each, seed {args.seed}, "
          f"work {args.work}", flush=True)  # fmt: skip
    kills = drill(kinds, args.kills, args.seed, args.work, tuple(args.phases.split(",")))
    for k in kills:
        if k.kind.endswith("-guest"):
            k.kind = k.kind.removesuffix("-guest")
    if args.json:
        args.json.write_text(json.dumps([asdict(k) for k in kills]))
    print(summary(kills))
    bad = [k for k in kills if not k.ok]
    for k in bad:
        print(f"FAILED {k.kind} #{k.index} ({k.phase_seen}): leftovers {k.leftovers}, "
              f"touched {k.touched}, problems {k.problems}")  # fmt: skip
    return 1 if bad else 0


def _netem_text(kind: Kind) -> str:
    text = (REPO / kind.scenario).read_text(encoding="utf-8")
    return re.sub(r"loss_pct = 0.5", 'loss_pct = 0.5\nbackend = "netem"', text, count=1)


if __name__ == "__main__":
    sys.exit(main())
