"""References in scenario strings: ``${hosts.NAME.addr}``, ``${params.NAME}``,
``${devices.NAME.ATTR}``, ``${signal.source}``/``${signal.sink}`` and a sweep's
``${NAME}``; ``$${`` stands for a literal ``${``.

Substitution builds a string for an argv or an environment; nothing here (nor any
scenario value) ever reaches a shell.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from latlab.lab.scenario.errors import Problem, ScenarioError

REF_RE = re.compile(r"\$\$\{|\$\{([^}]*)\}")
REF_ROOTS = ("hosts", "params", "devices", "signal")
"""First words of the dotted reference forms (a sweep variable may not be named so)."""
HOST_ATTRS = ("addr",)
DEVICE_ATTRS = ("period_us", "buffer_us", "rate", "period_frames", "periods", "channels")
SIGNAL_REFS = {"inject": "signal.source", "record": "signal.sink"}
SIGNAL_PLACEHOLDERS = {ref: "identity" for ref in SIGNAL_REFS.values()}
"""The pipeline fragment a GStreamer end of ``[signal]`` holds (``${signal.source}``...)."""


def expand(text: str, lookup: Callable[[str], str]) -> str:
    """Replace each ``${ref}`` in ``text`` by ``lookup(ref)``; ``$${`` yields ``${``.

    ``lookup`` raises KeyError with a problem description for an unknown reference;
    that becomes a :class:`Problem`.
    """

    def repl(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "${"
        try:
            return lookup(match.group(1))
        except KeyError as exc:
            raise Problem(exc.args[0]) from None

    return REF_RE.sub(repl, text)


def substitute(text: str, lookup: Callable[[str], str], source: str, where: str) -> str:
    """:func:`expand`, with an unknown reference raised as ``ScenarioError`` naming
    ``source`` and ``where`` (a key path such as ``processes.rx.pipeline``, or "")."""
    try:
        return expand(text, lookup)
    except Problem as exc:
        prefix = f"{source}: {where}: " if where else f"{source}: "
        raise ScenarioError(prefix + exc.problem) from None


def lookup_ref(
    ref: str,
    params: Mapping[str, str],
    addrs: Mapping[str, str],
    devices: Mapping[str, Mapping[str, str]] | None = None,
    signal: Mapping[str, str] | None = None,
) -> str:
    """Value of one reference (KeyError with the problem if it is unknown).

    ``addrs`` maps host names to addresses, ``devices`` device names to their
    :meth:`Device.refs`, ``signal`` holds the ``${signal.source}``/``${signal.sink}``
    fragments (a run's files; at parse time a placeholder).
    """
    if ref in SIGNAL_REFS.values():
        if signal is None:
            raise KeyError(f"'${{{ref}}}' is only known while running a scenario with [signal]")
        return signal[ref]
    parts = ref.split(".")
    if len(parts) == 3 and parts[0] == "devices" and parts[2] in DEVICE_ATTRS:
        return _known(ref, "devices", devices or {}, parts[1])[parts[2]]
    if len(parts) == 2 and parts[0] == "params":
        return _known(ref, "params", params, parts[1])
    if len(parts) == 3 and parts[0] == "hosts" and parts[2] in HOST_ATTRS:
        return _known(ref, "hosts", addrs, parts[1])
    raise KeyError(
        f"unknown reference '${{{ref}}}' (known forms: ${{hosts.NAME.addr}}, ${{params.NAME}}, "
        "${devices.NAME.ATTR}, ${signal.source}, ${signal.sink}, ${NAME} of a [sweep])"
    )


def _known(ref: str, what: str, table: Mapping[str, Any], name: str) -> Any:
    """``table[name]``, or KeyError naming the reference and what is known."""
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise KeyError(f"unknown reference '${{{ref}}}' ({what}: {known})")
    return table[name]


def text_of(value: Any) -> str:
    """A TOML value as it is substituted into text (booleans as ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def scalar_text(value: Any) -> str:
    """A ``[params]`` or ``env`` value as text; Problem unless a string, number or boolean."""
    if not isinstance(value, str | int | float):
        raise Problem("must be a string, number or boolean")
    return text_of(value)
