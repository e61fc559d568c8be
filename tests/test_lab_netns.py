"""Lab hosts as real network namespaces: creation, connectivity, cleanup (the cleanup of
killed runs, by their journals: tests/test_lab_ownership.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from latlab.lab.netns import (
    IFNAMSIZ,
    Lab,
    LabError,
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
