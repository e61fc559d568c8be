"""Segment kinds: every kind is documented with what it includes, and the rules hold."""

from __future__ import annotations

import re
from pathlib import Path

from latlab.stitch.kinds import KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_every_kind_is_documented_with_what_it_includes() -> None:
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (.+) \|$", DOC.read_text(), re.MULTILINE))
    assert rows == KINDS
