"""The errors of scenario files: what users see and what the validators raise.

A validator that finds a rule broken raises :class:`Problem` (a ValueError, so pydantic
records it with the location of the value it was validating); the loader turns the
first problem into one :class:`ScenarioError` line, ``FILE: WHERE: PROBLEM``.
"""

from __future__ import annotations

from latlab.errors import UserInputError

Loc = tuple[str | int, ...]
"""A key path: table keys and array indices, e.g. ``("links", 0, "loss_pct")``."""


class ScenarioError(UserInputError, ValueError):
    """A scenario file is invalid; ``str()`` is one line: ``FILE: WHERE: PROBLEM``."""


class Problem(ValueError):
    """One broken rule: ``problem`` (one line, no location) at key path ``at``.

    ``at`` continues the location of the value being validated (e.g. a link's
    validator says ``at=("reverse", "ge_p")``) unless ``absolute`` is true, when it
    starts at the top of the file (the document-wide rules).
    """

    def __init__(self, problem: str, at: Loc = (), *, absolute: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.at = at
        self.absolute = absolute

    def within(self, *loc: str | int) -> Problem:
        """The same problem, placed under ``loc`` from the top of the file."""
        return Problem(self.problem, (*loc, *self.at), absolute=True)


def key_path(loc: Loc) -> str:
    """``("links", 0, "loss_pct")`` as ``links[0].loss_pct``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def scenario_error(source: str, where: Loc, problem: str) -> ScenarioError:
    """The one-line error ``SOURCE: WHERE: PROBLEM`` (no ``WHERE`` at the top level)."""
    path = key_path(where)
    return ScenarioError(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")
