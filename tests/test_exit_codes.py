"""The exit codes are documented where the code defines them."""

from __future__ import annotations

import re
from pathlib import Path

from latlab.errors import EXIT_CODES

DOC = Path(__file__).resolve().parents[1] / "docs" / "exit-codes.md"


def test_every_exit_code_is_documented() -> None:
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", DOC.read_text(encoding="utf-8"), re.M))
    assert {int(code): text for code, text in rows.items()} == EXIT_CODES
