"""Test matrices (``[sweep]``): a scenario's variables, their points and each point's file.

A ``[sweep]`` table (``mode = "product" | "zip"``, ``NAME = [values]``) makes a scenario
file a template whose strings reference the variables as ``${NAME}``. This module
expands it: :meth:`Sweep.combinations` gives each point's values in run order,
:meth:`Sweep.point_data` the point's concrete file (decoded TOML), :func:`point_name`
its directory name. Validating the sweep is the model's job
(:class:`latlab.lab.scenario.model.SweptFile`); running one is
:mod:`latlab.lab.sweep`'s.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from latlab.lab.scenario.errors import Loc
from latlab.lab.scenario.refs import REF_RE, text_of

SweepMode = Literal["product", "zip"]
EXACT_REF_RE = re.compile(r"\$\{([^}]*)\}")
POINT_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._+-]")
POINT_NAME_MAX = 120


@dataclass(frozen=True)
class Sweep:
    """A test matrix (``[sweep]``): variables and their values, combined into points.

    ``mode`` is ``"product"`` (every combination, the last variable changing fastest)
    or ``"zip"`` (the i-th values of all lists together). ``template`` is the
    scenario's decoded TOML without ``[sweep]``; :meth:`point_data` instantiates it.
    """

    mode: str
    variables: tuple[tuple[str, tuple[Any, ...]], ...]
    template: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def names(self) -> list[str]:
        """Variable names in file order."""
        return [name for name, _ in self.variables]

    def combinations(self) -> list[dict[str, Any]]:
        """Each point's value of every variable, in run order."""
        lists = [values for _, values in self.variables]
        rows = itertools.product(*lists) if self.mode == "product" else zip(*lists, strict=True)
        return [dict(zip(self.names, row, strict=True)) for row in rows]

    def definition(self) -> dict[str, Any]:
        """The sweep as JSON-able data: mode and each variable's values."""
        return {"mode": self.mode, "variables": {n: list(v) for n, v in self.variables}}

    def point_data(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The template with each ``${NAME}`` replaced and swept ``[params]`` keys set.

        A string that is exactly ``"${NAME}"`` takes the value itself (its TOML type),
        so numeric keys can be swept; elsewhere the value is substituted as text.
        """
        data = _swept(dict(self.template), values)
        params = data.get("params")
        if isinstance(params, dict):
            params.update({k: v for k, v in values.items() if k in params})
        return data

    def with_template(self, **keys: Any) -> Sweep:
        """A copy whose template has some top-level keys replaced (e.g. ``duration_s``)."""
        return replace(self, template={**self.template, **keys})


def point_name(values: Mapping[str, Any]) -> str:
    """The filesystem-safe name of a sweep point, e.g. ``jb=20,delay=0``.

    Characters other than letters, digits, ``.``, ``_``, ``+`` and ``-`` in values
    become ``_``; names longer than 120 characters end in a short hash.
    """
    parts = (f"{k}={POINT_UNSAFE_RE.sub('_', text_of(v))}" for k, v in values.items())
    name = ",".join(parts)
    if len(name) > POINT_NAME_MAX:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: POINT_NAME_MAX - 9]}~{digest}"
    return name


def sweep_refs(template: Mapping[str, Any]) -> Iterator[tuple[Loc, str]]:
    """Each ``${NAME}`` in the template's strings (a sweep variable: no dot) with its
    location; ``$${`` and the dotted forms (``${params.X}``...) are not sweep references."""
    for loc, text in _strings(template, ()):
        for match in REF_RE.finditer(text):
            ref = match.group(1)
            if ref is not None and "." not in ref:
                yield loc, ref


def _swept(value: Any, values: Mapping[str, Any]) -> Any:
    """``value`` (decoded TOML) with the sweep references to ``values`` replaced."""
    if isinstance(value, str):
        exact = EXACT_REF_RE.fullmatch(value)
        if exact and exact.group(1) in values:
            return values[exact.group(1)]
        return REF_RE.sub(lambda m: _sweep_ref(m, values), value)
    if isinstance(value, dict):
        return {k: _swept(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_swept(v, values) for v in value]
    return value


def _sweep_ref(match: re.Match[str], values: Mapping[str, Any]) -> str:
    ref = match.group(1)
    return match.group(0) if ref is None or ref not in values else text_of(values[ref])


def _strings(value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    """Every string in decoded TOML with its location."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, (*loc, i))
