"""Lab hosts as network namespaces joined by veth pairs.

Names carry the owning latlab process's pid, so that runs at once never collide; what a
run owns is what its journal lists (:mod:`latlab.lab.owner`), each namespace recorded
before it is created, so leftovers of a killed run are removed by the next run without
touching anything else:

* namespace ``llab-<pid>-<host>``
* veth ends ``ll<pid>v<i>a`` / ``ll<pid>v<i>b`` for link ``i`` (at most 15 characters)

Link ``i`` gets the subnet ``10.77.<i>.0/30``: its first host ``.1``, its second ``.2``.
An impaired link goes through a router namespace ``llab-<pid>-l<i>`` running the link
emulator (router-side veth ends ``ll<pid>r<i>a|b``; see :mod:`latlab.lab.links`).
A host's address is the address of its first link (``127.0.0.1`` without links).
All commands run ``ip`` (iproute2) with argument lists; nothing passes through a shell.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from latlab.errors import EnvironmentProblem, MeasurementError
from latlab.lab import links as emulated
from latlab.lab import netem, owner
from latlab.lab.capture import Capture, CaptureError
from latlab.lab.clocklab import ClockLabError, HostClocks, domain_of
from latlab.lab.jackfiles import remove_jack_server
from latlab.lab.links import LinkPlan
from latlab.lab.process import failure_line
from latlab.lab.signals import signals_deferred, sigterm_raises
from latlab.rundir import LINKS

if TYPE_CHECKING:
    from latlab.lab.scenario import Scenario

NS_PREFIX = "llab-"
IFNAMSIZ = 15
SUBNET_BASE = "10.77"
MAX_LINKS = 256
LOOPBACK = "127.0.0.1"
# Owner "pid" of the standing lab of `latlab lab up` (llab-0-HOST): no process owns it.
STANDING_OWNER = 0


class LabError(MeasurementError, RuntimeError):
    """Setting up or tearing down the lab failed; ``str()`` is one line."""


class CpusUnavailable(EnvironmentProblem):
    """A host's ``cpus`` names a CPU latlab may not run on here; ``str()`` is one line."""


def namespace_name(pid: int, host: str) -> str:
    """Namespace name for ``host`` owned by process ``pid``."""
    return f"{NS_PREFIX}{pid}-{host}"


def veth_names(pid: int, index: int) -> tuple[str, str]:
    """The two veth interface names for link ``index`` owned by ``pid``."""
    names = (f"ll{pid}v{index}a", f"ll{pid}v{index}b")
    for name in names:
        if len(name) > IFNAMSIZ:
            raise LabError(f"interface name '{name}' longer than {IFNAMSIZ} characters")
    return names


def plan_links(pid: int, links: Sequence[tuple[str, str]]) -> list[LinkPlan]:
    """Assign veth names and /30 addresses to each link, in order."""
    if len(links) > MAX_LINKS:
        raise LabError(f"at most {MAX_LINKS} links are supported, not {len(links)}")
    plans = []
    for i, (a, b) in enumerate(links):
        veth_a, veth_b = veth_names(pid, i)
        addr_a, addr_b = f"{SUBNET_BASE}.{i}.1", f"{SUBNET_BASE}.{i}.2"
        plans.append(LinkPlan(i, a, b, veth_a, veth_b, addr_a, addr_b))
    return plans


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS...``; on failure (with ``check``) raise LabError with its message."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {failure_line(result)}")
    return result


def list_namespaces() -> list[str]:
    """Names of all network namespaces known to ``ip netns``."""
    out = ip("-j", "netns", "list").stdout.strip()
    return [entry["name"] for entry in json.loads(out)] if out else []


def list_root_links() -> list[str]:
    """Interface names in this process's network namespace."""
    out = ip("-j", "link", "show").stdout.strip()
    return [entry["ifname"] for entry in json.loads(out)] if out else []


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_namespace_processes(namespace: str) -> list[int]:
    """SIGKILL every process living in ``namespace``; returns their pids."""
    result = ip("netns", "pids", namespace, check=False)
    pids = [int(p) for p in result.stdout.split() if p.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def add_namespace(namespace: str) -> None:
    """Create ``namespace`` (recorded in this process's journal first) with its loopback up."""
    owner.record("namespace", namespace)
    ip("netns", "add", namespace)
    ip("-n", namespace, "link", "set", "lo", "up")


def delete_namespace(namespace: str, *, check: bool = True, forget: bool = True) -> None:
    """Kill the processes inside ``namespace`` and delete it (no error if it is gone);
    struck off this process's journal (``forget``; not for another process's)."""
    if namespace in list_namespaces():
        kill_namespace_processes(namespace)
        ip("netns", "del", namespace, check=check)
    if forget:
        owner.forget("namespace", namespace)


def delete_interface(name: str) -> None:
    """Delete an interface of latlab's own namespace, if it is there."""
    if name in list_root_links():
        ip("link", "del", name, check=False)


def _cleaner() -> owner.Cleaner:
    return owner.Cleaner(
        namespace=lambda name: delete_namespace(name, check=False, forget=False),
        interface=delete_interface,
        jack=remove_jack_server,
    )


def cleanup_stale() -> list[str]:
    """Remove what every killed latlab process's journal lists (:mod:`latlab.lab.owner`):
    its processes (those whose pid still has the recorded start time), namespaces (and
    the processes in them), JACK servers' files and registry slots, private directories;
    the run directory it was writing is marked ``incomplete``. Nothing a journal does not
    list is touched, and no journal of a live latlab process or of a standing lab.
    ``latlab run``, ``lab up`` and ``lab cleanup`` call it first; returns what it removed."""
    return owner.cleanup_dead(_cleaner())


def remove_standing(journal_path: Path) -> list[str]:
    """Remove what a standing lab's journal lists (``latlab lab down``)."""
    return owner.remove_standing(journal_path, _cleaner())


class Lab:
    """Hosts (network namespaces) and links (veth pairs) for one run.

    Use as a context manager: the lab is torn down on normal exit, exceptions,
    Ctrl-C and SIGTERM (which raises :class:`~latlab.lab.signals.Terminated` meanwhile),
    and at interpreter exit as a last resort.
    """

    def __init__(
        self,
        hosts: Sequence[str],
        links: Sequence[tuple[str, str]] = (),
        *,
        owner_pid: int | None = None,
        run_dir: Path | None = None,
        link_configs: Sequence[Mapping[str, Any] | None] = (),
        exited: threading.Event | None = None,
        link_backends: Sequence[str] = (),
        capture_hosts: Sequence[str] = (),
    ) -> None:
        """``link_configs[i]``: emulator configuration of link ``i`` (None: direct veth);
        ``link_backends[i]``: the scenario's ``backend`` for it (default latlab-linkemu);
        ``capture_hosts``: hosts whose every packet is captured (``run_dir/captures/``).

        Emulated links log to ``run_dir/links/`` (without ``run_dir``: to a temporary
        directory removed when the lab goes down); ``exited`` is set when an emulator exits.
        """
        self.pid = owner_pid if owner_pid is not None else os.getpid()
        self.hosts = list(hosts)
        for a, b in links:
            if a not in self.hosts or b not in self.hosts or a == b:
                raise LabError(f"bad link between '{a}' and '{b}' (hosts: {self.hosts})")
        self.links = plan_links(self.pid, links)
        self.link_configs = list(link_configs) + [None] * (len(links) - len(link_configs))
        self.run_dir = run_dir
        self.exited = exited
        self.link_backends = list(link_backends) + [emulated.BACKEND_EMULATOR] * (
            len(links) - len(link_backends)
        )
        self.emulators: dict[int, emulated.Emulator] = {}
        self.netem_links: dict[int, netem.NetemLink] = {}
        for host in capture_hosts:
            self._check_host(host)
        self.capture_hosts = list(capture_hosts)
        self.captures: list[Capture] = []
        self._check_router_names()
        self.clocks = HostClocks(())  # planted clocks: from_scenario sets them
        self.cpus: dict[str, tuple[int, ...]] = {}  # hosts' CPUs: from_scenario sets them
        self._created: list[str] = []
        self._stack = ExitStack()
        self._scratch: Path | None = None  # without run_dir: links' and captures' files

    @classmethod
    def from_scenario(
        cls,
        scenario: Scenario,
        *,
        run_dir: Path | None = None,
        exited: threading.Event | None = None,
        owner_pid: int | None = None,
        captures: bool = True,
    ) -> Lab:
        """A lab with the scenario's hosts (with their planted clocks) and links (impaired
        links through the emulator),
        capturing the packets of hosts with ``capture = true`` (unless ``captures`` is off).

        ``owner_pid`` names the owner (default: this process; STANDING_OWNER for ``lab up``).
        """
        links = [(link.a, link.b) for link in scenario.links]
        configs = [emulated.emulator_config(link) for link in scenario.links]
        lab = cls(
            scenario.host_names(),
            links,
            run_dir=run_dir,
            link_configs=configs,
            link_backends=[link.backend for link in scenario.links],
            capture_hosts=[h.name for h in scenario.hosts if h.capture and captures],
            exited=exited,
            owner_pid=owner_pid,
        )
        lab.clocks = HostClocks(scenario.hosts)
        lab.cpus = {h.name: h.cpus for h in scenario.hosts if h.cpus}
        lab.check_cpus()
        return lab

    def check_cpus(self) -> None:
        """CpusUnavailable if a host's ``cpus`` names a CPU this process may not run on."""
        usable = os.sched_getaffinity(0)
        for host, cpus in self.cpus.items():
            missing = sorted(set(cpus) - usable)
            if missing:
                raise CpusUnavailable(
                    f"host '{host}': cpus {missing} not available here "
                    f"(CPUs latlab may use: {', '.join(map(str, sorted(usable)))})"
                )

    def host_cpus(self, host: str) -> tuple[int, ...] | None:
        """The CPUs ``host``'s programs run on (None: any)."""
        self._check_host(host)
        return self.cpus.get(host)

    def namespace(self, host: str) -> str:
        """Namespace name of ``host``."""
        self._check_host(host)
        return namespace_name(self.pid, host)

    def addr(self, host: str) -> str:
        """Address of ``host``: its first link's address, or 127.0.0.1 without links."""
        self._check_host(host)
        for link in self.links:
            if host in (link.a, link.b):
                return link.addr_a if host == link.a else link.addr_b
        return LOOPBACK

    def host_addrs(self, host: str) -> list[str]:
        """Every address of ``host``, one per link, in link order (127.0.0.1 without)."""
        self._check_host(host)
        found = [link.addr_a if host == link.a else link.addr_b for link in self.links
                 if host in (link.a, link.b)]  # fmt: skip
        return found or [LOOPBACK]

    def addrs_towards(self, host: str, other: str) -> tuple[str, str]:
        """(``host``'s address, ``other``'s address) on the link joining them; LabError
        if none does."""
        for link in self.links:
            if {link.a, link.b} == {host, other}:
                pair = (link.addr_a, link.addr_b)
                return pair if host == link.a else (pair[1], pair[0])
        raise LabError(f"no link joins host '{host}' to host '{other}'")

    def addrs(self) -> dict[str, str]:
        """Address of every host."""
        return {host: self.addr(host) for host in self.hosts}

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run inside ``host``'s namespace (and its planted clock)."""
        return ["ip", "netns", "exec", self.namespace(host), *self.clocks.prefix(host), *argv]

    def describe(self) -> dict[str, Any]:
        """Hosts and links as plain data (for run.json)."""
        hosts = {h: {"namespace": self.namespace(h), "addr": self.addr(h),
                     **self.clocks.describe_host(h),
                     **({"cpus": list(self.cpus[h])} if h in self.cpus else {})}
                 for h in self.hosts}  # fmt: skip
        links = [
            {
                "between": [p.a, p.b],
                "interfaces": [p.veth_a, p.veth_b],
                "addrs": [f"{p.addr_a}/{p.prefix_len}", f"{p.addr_b}/{p.prefix_len}"],
                **self._describe_backend(p),
                **({"clock_domain": domain_of(p.a)} if self.clocks.clocks else {}),
            }
            for p in self.links
        ]
        described: dict[str, Any] = {"hosts": hosts, "links": links}
        if self.captures:
            described["captures"] = {c.host: c.describe() for c in self.captures}
        return described

    def _describe_backend(self, plan: LinkPlan) -> dict[str, Any]:
        if plan.index in self.netem_links:
            return self.netem_links[plan.index].describe()
        emulator = self.emulators.get(plan.index)
        if emulator is not None:
            return emulator.describe(self.run_dir)
        config = self.link_configs[plan.index]
        if config is not None:  # never started
            return {"backend": emulated.BACKEND_EMULATOR, "config": config, "log": None}
        return {"backend": emulated.BACKEND_DIRECT, "config": None, "log": None}

    def check_links(self) -> None:
        """LabError naming the link if an emulator has died."""
        try:
            emulated.check_emulators(list(self.emulators.values()))
            for link in self.netem_links.values():
                link.check()
            for capture in self.captures:
                capture.check()
        except (emulated.LinkError, netem.NetemError, CaptureError) as exc:
            raise LabError(str(exc)) from None

    def up(self) -> Lab:
        """Create namespaces and links; on any failure, remove what was created and re-raise."""
        atexit.register(self.down)
        try:
            existing = set(list_namespaces())
            for host in self.hosts:
                self._add_namespace(self.namespace(host), existing)
            try:
                self.clocks.up()
            except ClockLabError as exc:
                raise LabError(str(exc)) from None
            for link in self.links:
                self._add_link(link)
            for host in self.capture_hosts:
                self._add_capture(host)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop the link emulators, then delete exactly the namespaces this lab created."""
        with signals_deferred():
            for capture in self.captures:
                capture.stop()
            for emulator in self.emulators.values():
                emulator.stop()
            for link in self.netem_links.values():
                link.stop()
            self.clocks.down()
            if self._scratch is not None:  # its writers (emulators, captures) have stopped
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None
            errors = []
            while self._created:
                namespace = self._created[-1]
                try:
                    delete_namespace(namespace)
                except LabError as exc:
                    errors.append(str(exc))
                self._created.pop()
            atexit.unregister(self.down)
        if errors:
            raise LabError(errors[0])

    def __enter__(self) -> Lab:
        self._stack.enter_context(sigterm_raises())
        try:
            return self.up()
        except BaseException:
            self._stack.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.down()
        finally:
            self._stack.close()

    def _out_dir(self) -> Path:
        """The run directory, else a temporary one that ``down`` removes."""
        if self.run_dir is not None:
            return self.run_dir
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="llab-lab-"))
        return self._scratch

    def _add_capture(self, host: str) -> None:
        """Start capturing ``host``'s packets (in the run directory, else the lab's own)."""
        run_dir = self._out_dir()
        capture = Capture(host, self.namespace(host), run_dir,
                          self.exited or threading.Event())  # fmt: skip
        capture.child.argv[4:4] = self.clocks.prefix(host)  # the host's clock, if its own
        self.captures.append(capture)
        try:
            capture.start(os.environ)
        except CaptureError as exc:
            raise LabError(str(exc)) from None

    def _check_host(self, host: str) -> None:
        if host not in self.hosts:
            raise LabError(f"unknown host '{host}' (hosts: {', '.join(sorted(self.hosts))})")

    def _add_namespace(self, namespace: str, existing: set[str]) -> None:
        if namespace in existing:
            raise LabError(f"namespace '{namespace}' already exists (another lab in this process?)")
        self._created.append(namespace)
        add_namespace(namespace)

    def _add_link(self, link: LinkPlan) -> None:
        ns_a, ns_b = self.namespace(link.a), self.namespace(link.b)
        config = self.link_configs[link.index]
        if config is not None and not self._through_netem(link):
            self._add_router(link, config)
            return
        ip("link", "add", "name", link.veth_a, "netns", ns_a, "type", "veth",
           "peer", "name", link.veth_b, "netns", ns_b)  # fmt: skip
        self._address_hosts(link)
        if config is not None:
            self._add_netem(link, config)

    def _through_netem(self, link: LinkPlan) -> bool:
        """Whether an impaired link uses netem: asked for, or ``auto`` and the kernel has it."""
        backend = self.link_backends[link.index]
        if backend == emulated.BACKEND_EMULATOR:
            return False
        if backend == netem.BACKEND_NETEM and self._netem_missing is not None:
            raise LabError(
                f"links[{link.index}] ({link.a}-{link.b}): backend netem, but this kernel cannot "
                f"run it ({self._netem_missing}); "
                f'use backend = "{emulated.BACKEND_EMULATOR}" or "auto"'
            )
        return self._netem_missing is None

    @cached_property
    def _netem_missing(self) -> str | None:
        """Why this kernel cannot run netem, or None; asked once, on a namespace the lab
        created (the hosts' namespaces exist before any link)."""
        return netem.netem_missing(self.namespace(self.hosts[0]))

    def _add_netem(self, link: LinkPlan, config: Mapping[str, Any]) -> None:
        """The impairment as netem (+ tbf) qdiscs on the egress of both veth ends."""
        ends = [(self.namespace(link.a), link.veth_a), (self.namespace(link.b), link.veth_b)]
        try:
            for namespace, dev in ends:
                emulated.disable_offloads(namespace, dev)  # one packet is one packet
            netem_link = netem.NetemLink(f"{link.a}-{link.b}", ends, config)
            netem_link.start()
        except (emulated.LinkError, netem.NetemError) as exc:
            raise LabError(str(exc)) from None
        self.netem_links[link.index] = netem_link

    def _address_hosts(self, link: LinkPlan) -> None:
        ns_a, ns_b = self.namespace(link.a), self.namespace(link.b)
        for ns, dev, addr in ((ns_a, link.veth_a, link.addr_a), (ns_b, link.veth_b, link.addr_b)):
            ip("-n", ns, "addr", "add", f"{addr}/{link.prefix_len}", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")

    def _check_router_names(self) -> None:
        for plan in self.links:
            if self.link_configs[plan.index] is None:
                continue
            router = emulated.router_namespace(self.pid, plan.index)
            if router in (namespace_name(self.pid, h) for h in self.hosts):
                raise LabError(f"host name '{router.split('-', 2)[2]}' is reserved for link "
                               f"{plan.index}'s router namespace; rename the host")  # fmt: skip
            for name in emulated.router_ifaces(self.pid, plan.index):
                if len(name) > IFNAMSIZ:
                    raise LabError(f"interface name '{name}' longer than {IFNAMSIZ} characters")

    def _add_router(self, link: LinkPlan, config: Mapping[str, Any]) -> None:
        """Host a <-> router namespace (running the emulator) <-> host b."""
        router = emulated.router_namespace(self.pid, link.index)
        r_a, r_b = emulated.router_ifaces(self.pid, link.index)
        self._add_namespace(router, set(list_namespaces()))
        ends = ((link.a, link.veth_a, r_a), (link.b, link.veth_b, r_b))
        for host, veth, r_dev in ends:
            ip("link", "add", "name", veth, "netns", self.namespace(host), "type", "veth",
               "peer", "name", r_dev, "netns", router)  # fmt: skip
            ip("-n", router, "link", "set", r_dev, "addrgenmode", "none")
            ip("-n", router, "link", "set", r_dev, "up")
        try:
            cpu = emulated.release_cpu()
            for host, veth, r_dev in ends:
                for namespace, dev in ((self.namespace(host), veth), (router, r_dev)):
                    emulated.disable_offloads(namespace, dev)
                    if cpu is not None:
                        emulated.steer_receive_away(namespace, dev, cpu)
            self._address_hosts(link)
            out = self._out_dir() / LINKS
            emulator = emulated.Emulator(link, router, (r_a, r_b), config, out, self.exited)
            emulator.child.argv[4:4] = self.clocks.prefix(link.a)  # after ip netns exec NS
            self.emulators[link.index] = emulator
            emulator.start(os.environ)
        except emulated.LinkError as exc:
            raise LabError(str(exc)) from None
