"""Rules the test suite keeps (issue 14): every wait on a child process has a time limit,
so one stuck browser or pipeline fails its test instead of stalling CI."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Calls that block until a child process ends, and need ``timeout=``.
BLOCKING = {"run", "check_output", "check_call", "call", "communicate", "wait"}


def _untimed_waits(path: Path) -> list[str]:
    """``file:line call`` of each blocking subprocess call in ``path`` without a timeout."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        subprocess_call = isinstance(owner, ast.Name) and owner.id == "subprocess"
        if name not in BLOCKING or (name in {"run", "call"} and not subprocess_call):
            continue
        if name == "wait" and (node.args or not _is_process(owner)):
            continue  # Event.wait(t), Condition.wait(...) and the like
        if not any(k.arg == "timeout" for k in node.keywords) and not (
            name in {"communicate", "wait"} and node.args
        ):
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node.func)}")
    return found


def _is_process(owner: ast.expr) -> bool:
    """Whether ``owner`` names a child process (proc, child, popen, ...)."""
    text = ast.unparse(owner).lower()
    return any(word in text for word in ("proc", "child", "popen", "player", "recorder"))


def test_every_wait_on_a_child_process_has_a_time_limit() -> None:
    untimed = [hit for path in sorted(TESTS.glob("*.py")) for hit in _untimed_waits(path)]
    assert untimed == []
