"""Lab hosts as real network namespaces: creation, connectivity, cleanup, stale cleanup."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from latlab.lab.netns import (
    IFNAMSIZ,
    Lab,
    LabError,
    cleanup_stale,
    ip,
    list_namespaces,
    list_root_links,
    namespace_name,
    veth_names,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def ping(lab: Lab, src: str, dst: str) -> subprocess.CompletedProcess[str]:
    argv = lab.exec_argv(src, ["ping", "-c", "1", "-W", "1", lab.addr(dst)])
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def links_in(namespace: str) -> list[str]:
    return ip("-n", namespace, "-o", "link", "show").stdout.split("\n")


def dead_pid() -> int:
    """A pid that belongs to no running process (a child that has been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait(timeout=60)
    return child.pid


def test_names_fit_interface_limit() -> None:
    for name in veth_names(4194304, 255):
        assert len(name) <= IFNAMSIZ
    assert namespace_name(42, "tx") == "llab-42-tx"


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("ping") is None, reason="ping (iputils-ping) not installed")
def test_up_ping_down() -> None:
    lab = Lab(["tx", "rx", "alone"], [("tx", "rx")])
    with lab:
        names = [lab.namespace(h) for h in ("tx", "rx", "alone")]
        assert set(names) <= set(list_namespaces())
        assert lab.addr("tx") == "10.77.0.1"
        assert lab.addr("rx") == "10.77.0.2"
        assert lab.addr("alone") == "127.0.0.1"
        tx_links = " ".join(links_in(lab.namespace("tx")))
        assert lab.links[0].veth_a in tx_links
        assert "lo" in tx_links
        result = ping(lab, "tx", "rx")
        assert result.returncode == 0, result.stdout + result.stderr
        assert ping(lab, "rx", "tx").returncode == 0
        assert ping(lab, "alone", "alone").returncode == 0  # lo is up
    assert not set(names) & set(list_namespaces())
    assert lab.links[0].veth_a not in list_root_links()


@pytest.mark.e2e
def test_exception_inside_with_cleans_up() -> None:
    lab = Lab(["a", "b"], [("a", "b")])
    with pytest.raises(RuntimeError, match="boom"), lab:
        assert lab.namespace("a") in list_namespaces()
        raise RuntimeError("boom")
    assert lab.namespace("a") not in list_namespaces()
    assert lab.namespace("b") not in list_namespaces()


@pytest.mark.e2e
def test_keyboard_interrupt_inside_with_cleans_up() -> None:
    lab = Lab(["a"])
    with pytest.raises(KeyboardInterrupt), lab:
        raise KeyboardInterrupt
    assert lab.namespace("a") not in list_namespaces()


@pytest.mark.e2e
def test_down_kills_processes_left_in_namespace() -> None:
    with Lab(["a"]) as lab:
        child = subprocess.Popen(lab.exec_argv("a", ["sleep", "30"]))
    assert child.wait(timeout=5) == -9


@pytest.mark.e2e
def test_clash_with_existing_namespace_leaves_it_alone() -> None:
    with Lab(["a"]) as first:
        second = Lab(["a"])
        with pytest.raises(LabError, match="already exists"):
            second.up()
        assert first.namespace("a") in list_namespaces()


@pytest.mark.e2e
def test_cleanup_stale_removes_dead_owner_only() -> None:
    pid = dead_pid()
    stale = namespace_name(pid, "x")
    other = f"latlabtest-keep-{os.getpid()}"
    ip("netns", "add", stale)
    ip("netns", "add", other)
    try:
        with Lab(["live"]) as lab:
            removed = cleanup_stale()
            namespaces = list_namespaces()
            assert lab.namespace("live") in namespaces  # owner (this process) is alive
        assert stale in removed
        assert stale not in namespaces
        assert other in namespaces
    finally:
        ip("netns", "del", other, check=False)
        ip("netns", "del", stale, check=False)


@pytest.mark.e2e
def test_cleanup_stale_removes_dead_owner_veth() -> None:
    pid = dead_pid()
    name_a, name_b = veth_names(pid, 0)
    ip("link", "add", name_a, "type", "veth", "peer", "name", name_b)
    try:
        assert name_a in cleanup_stale()
        assert name_a not in list_root_links()
        assert name_b not in list_root_links()
    finally:
        ip("link", "del", name_a, check=False)
