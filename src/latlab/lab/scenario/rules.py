"""Value rules of scenario files, each a validator with its one-line problem.

The model (:mod:`latlab.lab.scenario.model`) annotates every key with one of these:
``Annotated[float, POSITIVE]`` checks a positive number and says
``must be a positive number, not -1`` otherwise. TOML values are taken as they are:
no coercion (``"10"`` is not a number, ``true`` is not 1).
"""

from __future__ import annotations

import math
import re
from typing import Any, get_args

from pydantic import AfterValidator, BeforeValidator, PlainValidator

from latlab.lab.scenario.errors import Problem
from latlab.lab.scenario.refs import REF_ROOTS, scalar_text
from latlab.lab.sched import parse_sched

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENTITY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
ENTITY_RULE = "letters, digits, '_', '-'; at most 32"
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def toml_kind(value: Any) -> str:
    """Name of a TOML value's type, for messages."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    kinds |= {list: "an array", dict: "a table"}
    return kinds.get(type(value), type(value).__name__)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Problem(f"must be a string, not {toml_kind(value)}")
    return value


def _positive(value: Any) -> float:
    if not _number(value) or not 0 < value < math.inf:
        raise Problem(f"must be a positive number, not {value!r}")
    return value


def _non_negative(value: Any) -> float:
    if not _number(value) or not 0 <= value < math.inf:
        raise Problem(f"must be a non-negative number, not {value!r}")
    return value


def _percent(value: Any) -> float:
    if _non_negative(value) > 100:
        raise Problem(f"is a percentage: at most 100, not {value!r}")
    return value


def _rate_kbit(value: Any) -> float:
    if _non_negative(value) == 0:
        raise Problem("must be > 0 (omit rate_kbit for an unlimited link)")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Problem(f"must be true or false, not {toml_kind(value)}")
    return value


def _entity_name(value: Any) -> str:
    if not ENTITY_RE.match(_text(value)):
        raise Problem(f"invalid name '{value}' ({ENTITY_RULE})")
    return value


def variable_name(value: Any) -> str:
    """A sweep variable's name: a name, and not the first word of a dotted reference."""
    if _entity_name(value) in REF_ROOTS:
        raise Problem(f"name clashes with the ${{{value}.…}} references")
    return value


def _scenario_name(value: Any) -> str:
    if not NAME_RE.match(_text(value)):
        raise Problem(f"invalid name '{value}' (letters, digits, '.', '_', '-'; at most 64)")
    return value


def _not_blank(value: Any) -> str:
    if not _text(value).strip():
        raise Problem("is empty")
    return value


def _sched(value: Any) -> Any:
    try:
        return parse_sched(_text(value))
    except ValueError as exc:
        raise Problem(str(exc)) from None


def _raw_caps(value: Any) -> str:
    if not _text(value).startswith("audio/x-raw"):
        raise Problem("must be raw audio caps (audio/x-raw,...)")
    return value


def _argv(value: Any) -> tuple[str, ...]:
    ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    if not ok or not value[0]:
        raise Problem('must be a non-empty array of strings, e.g. ["prog", "--x"]')
    return tuple(value)


def _flags(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise Problem('must be an array of flags, e.g. ["--mute-audio"]')
    return tuple(value)


def _env_names(table: dict[str, str]) -> dict[str, str]:
    for key in table:
        if not ENV_KEY_RE.match(key):
            raise Problem(f"invalid environment variable name '{key}'")
    return table


def sweep_values(value: Any) -> tuple[Any, ...]:
    """A sweep variable's values: a non-empty list of strings, numbers or booleans."""
    if not isinstance(value, list):
        raise Problem(f"must be a list of values (e.g. [20, 40]), not {toml_kind(value)}")
    if not value:
        raise Problem("is an empty list")
    for item in value:
        if not isinstance(item, str | int | float):
            raise Problem(f"values must be strings, numbers or booleans: {item!r}")
    return tuple(value)


TEXT = PlainValidator(_text)
POSITIVE = PlainValidator(_positive)
NON_NEGATIVE = PlainValidator(_non_negative)
PERCENT = PlainValidator(_percent)
RATE_KBIT = PlainValidator(_rate_kbit)
BOOLEAN = PlainValidator(_boolean)
ENTITY_NAME = PlainValidator(_entity_name)
SCENARIO_NAME = PlainValidator(_scenario_name)
NOT_BLANK = PlainValidator(_not_blank)
SCHED = PlainValidator(_sched)
RAW_CAPS = PlainValidator(_raw_caps)
ARGV = PlainValidator(_argv)
FLAGS = PlainValidator(_flags)
SCALAR_TEXT = PlainValidator(scalar_text)
ENV_NAMES = AfterValidator(_env_names)


def int_from(value: Any, low: int, high: int) -> int:
    """``value`` if it is an integer from ``low`` to ``high`` (booleans are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Problem(f"must be an integer from {low} to {high}, not {value!r}")
    return value


def _cpus(value: Any) -> tuple[int, ...]:
    """A non-empty list of distinct CPU numbers."""
    if not isinstance(value, list) or not value:
        raise Problem(f"must be a non-empty list of CPU numbers (e.g. [1]), not {value!r}")
    cpus = tuple(int_from(v, 0, MAX_CPU) for v in value)
    if len(set(cpus)) != len(cpus):
        raise Problem(f"lists a CPU twice: {value!r}")
    return cpus


MAX_CPU = 4095
CPUS = PlainValidator(_cpus)


def integer(low: int, high: int) -> PlainValidator:
    """An integer from ``low`` to ``high``."""
    return PlainValidator(lambda value: int_from(value, low, high))


def within(low: float, high: float, *, positive: bool = False) -> PlainValidator:
    """A number from ``low`` to ``high``; with ``positive``, first a positive number."""

    def check(value: Any) -> float:
        if positive:
            _positive(value)
        if not _number(value) or not low <= value <= high:
            raise Problem(f"must be from {low:g} to {high:g}, not {value!r}")
        return value

    return PlainValidator(check)


def choice(options: Any, what: str) -> PlainValidator:
    """One of the values of the Literal ``options``: ``unknown WHAT 'x' (known: a, b)``."""
    values = get_args(options)

    def check(value: Any) -> Any:
        if value not in values:
            raise Problem(f"unknown {what} {value!r} (known: {', '.join(values)})")
        return value

    return PlainValidator(check)


def named(options: Any, what: str) -> PlainValidator:
    """A string naming one of the Literal ``options``: ``unknown WHAT 'x' (WHATs: a, b)``."""
    values = get_args(options)

    def check(value: Any) -> str:
        if _text(value) not in values:
            raise Problem(f"unknown {what} '{value}' ({what}s: {', '.join(values)})")
        return value

    return PlainValidator(check)


def pair(what: str, example: str, *, distinct: bool = False) -> PlainValidator:
    """Two names (``between``), as a tuple: ``must be two WHAT, e.g. EXAMPLE``."""

    def check(value: Any) -> tuple[str, str]:
        ok = isinstance(value, list) and len(value) == 2
        ok = ok and all(isinstance(v, str) for v in value)
        if not ok or (distinct and value[0] == value[1]):
            raise Problem(f"must be two {what}, e.g. {example}")
        return (value[0], value[1])

    return PlainValidator(check)


def non_empty(problem: str) -> AfterValidator:
    """A table with at least one key, else ``problem``."""

    def check(table: dict[str, Any]) -> dict[str, Any]:
        if not table:
            raise Problem(problem)
        return table

    return AfterValidator(check)


def array_of_tables(example: str) -> BeforeValidator:
    """An array (its tables are checked by their model): ``must be an array of tables``."""

    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise Problem(f"must be an array of tables ({example})")
        return value

    return BeforeValidator(check)
