"""Reading scenario files: TOML text -> the typed model -> a :class:`Scenario`.

pydantic is imported on the first parse, not with this package: ``latlab --help``
and the modules that only use the scenario types do not pay for it. A validation
error becomes one line, ``FILE: KEY.PATH: PROBLEM``; pydantic's own text never
reaches a user.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latlab.lab.scenario.errors import Loc, Problem, ScenarioError, scenario_error
from latlab.lab.scenario.objects import Scenario
from latlab.lab.scenario.sweep import point_name

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError
    from pydantic_core import ErrorDetails

TABLE_ERRORS = ("dict_type", "model_type", "model_attributes_type", "dataclass_type")
ARRAY_ERRORS = ("list_type", "tuple_type")


def load_scenario(path: Path | str, *, processes_required: bool = True) -> Scenario:
    """Read and validate a scenario file (``lab up`` accepts one without processes)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    return parse_scenario(text, str(path), processes_required=processes_required)


def parse_scenario(
    text: str, source_name: str = "<scenario>", *, processes_required: bool = True
) -> Scenario:
    """Parse and validate scenario TOML ``text``; ``source_name`` prefixes error messages.

    A file with ``[sweep]`` has every point validated; the scenario returned has the
    first point's fields and :attr:`Scenario.sweep` set.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source_name}: TOML syntax error: {exc}") from None
    if "sweep" in data:
        return _swept_scenario(data, text, source_name, processes_required)
    return _scenario(data, text, source_name, processes_required)


def _scenario(data: dict[str, Any], text: str, source: str, required: bool) -> Scenario:
    """A file without ``[sweep]``; ``required``: whether it must have processes."""
    from latlab.lab.scenario.model import ScenarioFile

    model = _validate(ScenarioFile, data, source, processes_required=required)
    return model.build(source, text)


def _swept_scenario(data: dict[str, Any], text: str, source: str, required: bool) -> Scenario:
    """The sweep checked, then every point (``FILE [POINT]`` in messages); the fields
    are the first point's."""
    from latlab.lab.scenario.model import SweptFile

    sweep = _validate(SweptFile, data, source).build()
    points = [
        _scenario(sweep.point_data(values), text, f"{source} [{point_name(values)}]", required)
        for values in sweep.combinations()
    ]
    return replace(points[0], source=source, text=text, sweep=sweep)


def _validate(model: type[BaseModel], data: dict[str, Any], source: str, **context: Any) -> Any:
    """``data`` validated as ``model``; ScenarioError (one line) if it breaks a rule."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise _one_line(exc, source) from None


def _one_line(exc: ValidationError, source: str) -> ScenarioError:
    """The first error of a validation as ``SOURCE: KEY.PATH: PROBLEM``."""
    error = exc.errors(include_url=False)[0]
    loc = _key_path(error["loc"])
    problem = (error.get("ctx") or {}).get("error")
    if isinstance(problem, Problem):
        where = problem.at if problem.absolute else loc + problem.at
        return scenario_error(source, where, problem.problem)
    return scenario_error(source, *_pydantic_problem(error, loc))


def _key_path(loc: tuple[str | int, ...]) -> Loc:
    """pydantic's error location as a key path: without the ``[key]`` of a bad table key
    and the kind pydantic adds after ``processes.NAME`` (which of its models it chose)."""
    from latlab.lab.scenario.model import PROCESS_TAGS

    if len(loc) > 2 and loc[0] == "processes" and loc[2] in PROCESS_TAGS:
        loc = loc[:2] + loc[3:]
    return tuple(part for part in loc if part != "[key]")


def _pydantic_problem(error: ErrorDetails, loc: Loc) -> tuple[Loc, str]:
    """An error pydantic found itself (not a :class:`Problem`) at ``loc``, as a key path
    and a problem in latlab's words (pydantic's own text only as a last resort, on one
    line)."""
    from latlab.lab.scenario.rules import toml_kind

    kind = error["type"]
    if kind == "missing" and loc:
        return loc[:-1], f"missing '{loc[-1]}'"
    if kind == "extra_forbidden" and loc:
        return loc[:-1], f"unknown key '{loc[-1]}'"
    if kind in TABLE_ERRORS:
        return loc, f"must be a table, not {toml_kind(error['input'])}"
    if kind in ARRAY_ERRORS:
        return loc, f"must be an array, not {toml_kind(error['input'])}"
    return loc, " ".join(str(error["msg"]).split())
