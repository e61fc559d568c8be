"""User-Mode Linux for the netem tests: a kernel with sch_netem on a host whose own has none.

This machine's kernel has no sch_netem and loads no modules, so the netem backend runs in
Debian's User-Mode Linux (``linux.uml``, sch_netem as a module) with the host's root file
system (hostfs): the lab, tc and ping are the host's programs, the kernel is one with netem.

Whether a UML guest can run here is found out once, by a boot probe that loads sch_netem
and puts a netem qdisc on a loopback (about 2 s), and kept in a cache keyed by what
decides it (the UML binary, the host kernel, the CPU's flags, the shim's source). When
the probe fails, :func:`unavailable` gives its reason, and the netem tests skip with it.

Debian 12's UML (6.1) passes the host kernel a fixed 2696-byte XSAVE buffer when it
restores a guest process's registers; the host wants exactly its own XSAVE size (11008
bytes where the CPU has AMX), so on such hosts every guest panics at boot with
``userspace - ptrace set fp regs failed, errno = 14``. ``xstate_shim.c``, preloaded into
``linux.uml``, completes such a short write with the task's own state (a UML guest never
uses AMX); it passes everything through where the sizes agree, as here.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
UML = shutil.which("linux.uml")
MODULES = Path("/usr/lib/uml/modules")
SHIM_SOURCE = HERE / "xstate_shim.c"
PROBE_TIMEOUT_S = 60.0
PROBE_OK = "latlab-netem-probe-ok"
# What a failed guest prints about why (the first of these lines is the reason).
_FAILURE = re.compile(r"(failed|panic|error|not syncing|cannot|unable)", re.IGNORECASE)
# What every UML boot here prints and means nothing (no iomem, no block device).
_BENIGN = re.compile(r"(mmapper_init|ubd device)")


def cache_dir() -> Path:
    """Where the built shim and the probe's verdict are kept (per user)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "latlab" / "uml"


def shim() -> Path:
    """The xstate shim, built with the system's C compiler once per source version."""
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:12]
    built = cache_dir() / f"xstate_shim-{digest}.so"
    if not built.is_file():
        built.parent.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(".tmp")
        subprocess.run(
            ["cc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(SHIM_SOURCE), "-ldl"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        partial.replace(built)
    return built


def boot(workdir: Path, command: str, *, wrapper: tuple[str, ...] = (), timeout: float) -> str:
    """Boot UML with the host's root file system, run ``command`` (a fixed shell line) in
    the repository, power off; return the console output. ``wrapper`` goes before
    ``linux.uml`` in the argv (the tests use it to simulate a host UML cannot run on)."""
    assert UML is not None, "user-mode-linux is not installed (scripts/setup.sh)"
    init = workdir.resolve() / "uml-init.sh"  # the guest kernel opens init by absolute path
    init.write_text(
        "#!/bin/sh\n"
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root\n"
        "mount -t proc proc /proc\nmount -t sysfs sys /sys\n"
        # namespaces are named under /run: keep the host's own clean
        "mount -t tmpfs tmpfs /run\nmount -t tmpfs tmpfs /dev/shm\n"
        f"for ko in $(find {MODULES} -name 'sch_netem.ko*' -o -name 'sch_tbf.ko*'"
        " -o -name 'veth.ko*'); do insmod $ko; done\n"
        f"cd {HERE.parents[1]} && {command}\n"
        "echo latlab-uml-exit $?\n"
        "echo o > /proc/sysrq-trigger\n",
        encoding="utf-8",
    )
    init.chmod(0o755)
    argv = [*wrapper, UML, "mem=2G", "rootfstype=hostfs", "rootflags=/", "rw", f"init={init}",
            "con0=fd:0,fd:1", "con=null"]  # fmt: skip
    env = {**os.environ, "LD_PRELOAD": str(shim())}
    result = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
        check=False, env=env, start_new_session=True,
    )  # fmt: skip
    return result.stdout + result.stderr


def failure_reason(console: str) -> str:
    """Why a guest did not get to run its command, on one line: the line before its kernel
    panic and the panic, else its last failure line that every boot does not print."""
    lines = [line.strip() for line in console.splitlines() if line.strip()]
    panic = next((i for i, line in enumerate(lines) if "Kernel panic" in line), None)
    if panic is not None:
        return "; ".join(lines[max(0, panic - 1) : panic + 1])
    failures = [line for line in lines if _FAILURE.search(line) and not _BENIGN.search(line)]
    if failures:
        return failures[-1]
    return "the guest printed no reason: " + (lines or ["no output"])[-1]


def probe(*, wrapper: tuple[str, ...] = ()) -> str | None:
    """Boot a UML guest that puts a netem qdisc on a loopback: None when it worked, else
    why not (one line). Not cached: :func:`unavailable` caches it."""
    if UML is None:
        return "user-mode-linux is not installed (scripts/setup.sh installs it)"
    with tempfile.TemporaryDirectory(prefix="latlab-uml-probe-") as workdir:
        command = f"tc qdisc add dev lo root netem delay 1ms && echo {PROBE_OK}"
        try:
            console = boot(Path(workdir), command, wrapper=wrapper, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"a User-Mode Linux guest did not finish booting in {PROBE_TIMEOUT_S:g} s"
        except subprocess.CalledProcessError as exc:  # building the shim
            return f"cannot build {SHIM_SOURCE.name}: {exc.stderr.strip() or exc}"
        except OSError as exc:
            return f"cannot start User-Mode Linux: {exc}"
    if PROBE_OK in console:
        return None
    return failure_reason(console)


def _probe_key() -> dict[str, str]:
    """What decides whether UML runs: its binary, the host kernel, the CPU, the shim."""
    flags = ""
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                flags = line
                break
    uml = Path(UML) if UML else None
    return {
        "uml": f"{uml}:{uml.stat().st_mtime_ns}" if uml else "",
        "kernel": platform.release(),
        "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "shim": hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:12],
    }


def unavailable() -> str | None:
    """Why a UML guest with netem cannot run on this host (None: it can), from the boot
    probe, run once and cached in ``cache_dir()/probe.json`` while its key holds."""
    key = _probe_key()
    cache = cache_dir() / "probe.json"
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return kept.get("reason")
    except (OSError, ValueError):
        pass
    reason = probe()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "reason": reason}), encoding="utf-8")
    return reason
