"""The run directory has one owner: latlab/rundir.py names every file and folder in it, and
docs/run-dir.md documents each of them. No other module spells a run-dir name."""

from __future__ import annotations

import ast
from pathlib import Path

from latlab import rundir

SRC = Path(__file__).resolve().parents[1] / "src" / "latlab"
DOC = Path(__file__).resolve().parents[1] / "docs" / "run-dir.md"
SUFFIXES = (".json", ".parquet", ".lltrace", ".lllink", ".wav", ".toml", ".html", ".arrow",
            ".stdout", ".stderr", ".jsonl", ".lock", ".devtools")  # fmt: skip


def _names() -> set[str]:
    """Every file and folder name rundir owns (its upper-case string constants that are
    names, not schemas)."""
    return {
        value
        for key, value in vars(rundir).items()
        if key.isupper() and isinstance(value, str) and value and "latlab." not in value
        and "/" not in value and key != "RESOURCES_SYSTEM"
    }  # fmt: skip


def _filename_like(text: str, names: set[str]) -> bool:
    bare = text.lstrip("*")
    return text in names or (bare.endswith(SUFFIXES) and " " not in bare and len(bare) < 64)


def _offences(path: Path, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        literal = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.Constant) and isinstance(right.value, str):
                literal = right.value  # path / "name"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"glob", "rglob"} and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    literal = arg.value
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if isinstance(value, str) and any(t.endswith(("_FILE", "_DIR")) for t in targets):
                literal = value
        if literal is not None and _filename_like(literal, names):
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: {literal!r}")
    return found


def test_no_module_but_the_owner_spells_a_run_dir_name() -> None:
    names = _names()
    modules = [p for p in sorted(SRC.rglob("*.py")) if p != SRC / "rundir.py"]
    assert [hit for path in modules for hit in _offences(path, names)] == []


def test_the_layout_document_names_every_file_and_folder() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert sorted(name for name in _names() if name not in text) == []
