"""Type checking of option values against a dataclass's field annotations.

Every config dataclass (run settings, model sizes, decoder, strategy and task options) is built
from YAML through `check_fields`, so a value of the wrong type fails when the config is read, with
the key and the expected type, instead of as a TypeError deep inside training. PyYAML reads
`5e-4` (no dot) as a string; a numeric string is turned into the number a float field means (and
into an int for an int field when it is an exact integer, e.g. "1e3" -> 1000).
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any

from atnat.core.errors import AtnatError

_INTEGER = re.compile(r"[-+]?\d+")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_NONE = type(None)
MAX_SEARCH = 1024  # beam sizes, length beams, samples, iterations, at most (a beam of 10^9 was killed for memory)
MAX_THREADS = 1024  # CPU threads, at most (torch takes 10^9 and asks for them at its first operation)


class OptionTypeError(AtnatError):
    """A value whose type does not match its field; `key` is its path inside the dataclass."""

    def __init__(self, key: str, expected: str, value: Any):
        self.key, self.problem = key, f"expected {expected}, got {value!r}"
        super().__init__(f"{key}: {self.problem}")


def check_fields(cls: type, data: dict) -> dict:
    """A copy of `data` (keys: fields of dataclass `cls`) with each value checked against the
    field's annotation: lists become tuples for tuple fields, numeric strings become numbers."""
    hints = typing.get_type_hints(cls)
    out = dict(data)
    for f in dataclasses.fields(cls):
        if f.name in out:
            out[f.name] = check_value(out[f.name], hints[f.name], f.name)
    return out


def check_value(value: Any, tp: Any, key: str) -> Any:
    """`value` as type `tp` (converted where a YAML spelling means it), or OptionTypeError."""
    if tp is Any or tp is object:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and _NONE in args:
            return None
        for arg in (a for a in args if a is not _NONE):
            try:
                return check_value(value, arg, key)
            except OptionTypeError:
                continue
        raise OptionTypeError(key, describe(tp), value)
    if tp is int:
        return _integer(value, key)
    if tp is float:
        return _float(value, key)
    if tp is bool or tp is str:
        if type(value) is not tp:
            raise OptionTypeError(key, describe(tp), value)
        return value
    if tp is tuple or origin is tuple or tp is list or origin is list:
        return _sequence(value, tp, key)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise OptionTypeError(key, describe(tp), value)
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise OptionTypeError(key, describe(tp), value)
    return value


def _integer(value: Any, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()) and float(value).is_integer():
        return int(float(value))
    raise OptionTypeError(key, "an integer", value)


def _float(value: Any, key: str) -> float | int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value  # an int is a fine float; it is kept as written
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    raise OptionTypeError(key, "a number", value)


def _sequence(value: Any, tp: Any, key: str) -> tuple | list:
    if not isinstance(value, (list, tuple)):
        raise OptionTypeError(key, describe(tp), value)
    args = typing.get_args(tp)
    if args and args[-1] is not Ellipsis and len(args) != len(value):
        raise OptionTypeError(key, describe(tp), value)
    if args:
        element = (lambda i: args[0]) if args[-1] is Ellipsis or len(args) == 1 else (lambda i: args[i])
        value = [check_value(v, element(i), f"{key}[{i}]") for i, v in enumerate(value)]
    return list(value) if (tp is list or typing.get_origin(tp) is list) else tuple(value)


def describe(tp: Any) -> str:
    """How an error names a type: 'an integer', 'a list of 2 numbers', 'a string or null' ..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [describe(a) for a in args if a is not _NONE]
        return " or ".join(parts + (["null"] if _NONE in args else []))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping",
             tuple: "a list", list: "a list"}
    if tp in names:
        return names[tp]
    if origin is dict:
        return "a mapping"
    if origin in (tuple, list):
        if not args:
            return "a list"
        if args[-1] is Ellipsis or origin is list:
            return f"a list of {_plural(args[0])}"
        if len(set(args)) == 1:
            return f"a list of {len(args)} {_plural(args[0])}"
        return "a list of " + ", ".join(describe(a) for a in args)
    return f"a {getattr(tp, '__name__', str(tp))}"


def _plural(tp: Any) -> str:
    return {int: "integers", float: "numbers", bool: "booleans", str: "strings"}.get(tp, describe(tp))


def require(ok: bool, owner: str, field: str, expected: str, value: Any) -> None:
    """The one wording of an option value error: `{owner}: {field} must be {expected}, got {value!r}`
    (owner: "strategy 'beam'", "decoder options", "train" ...)."""
    if not ok:
        raise AtnatError(f"{owner}: {field} must be {expected}, got {value!r}")


def require_choice(value: Any, choices: tuple, owner: str, field: str) -> None:
    require(value in choices, owner, field, "one of " + ", ".join(map(str, choices)), value)


def require_at_least(value: Any, low: float, owner: str, field: str, *, integer: bool = True) -> None:
    ok = (isinstance(value, int) and not isinstance(value, bool)) if integer else isinstance(value, (int, float))
    require(ok and value >= low, owner, field, f"{'an integer' if integer else 'a number'} >= {low}", value)


def require_between(value: Any, low: int, high: int, owner: str, field: str) -> None:
    """An integer in [low, high]: the declared range of a size (a larger one is a typo or a planted file,
    and would allocate without bound before failing)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    require(ok, owner, field, f"an integer from {low} to {high:,}", value)


def require_threads(value: Any, owner: str, field: str) -> None:
    """A CPU thread count: an integer from 1 to MAX_THREADS, or None (torch's default)."""
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_THREADS)
    require(ok, owner, field, f"an integer from 1 to {MAX_THREADS} or null (torch's default)", value)


def require_number_between(value: Any, low: float, high: float, owner: str, field: str, why: str = "") -> None:
    """A finite number in [low, high] (an int is a number); `why` says what lies beyond."""
    require(_finite(value) and low <= value <= high, owner, field,
            f"a finite number from {low:g} to {high:g}" + (f" ({why})" if why else ""), value)


def require_positive(owner: str, **fields: float) -> None:
    for field, value in fields.items():
        require(_finite(value) and value > 0, owner, field, "> 0", value)


def require_fraction(value: Any, owner: str, field: str) -> None:
    """0 <= value < 1 (dropout, label smoothing: 1 would leave nothing to learn)."""
    require(_finite(value) and 0 <= value < 1, owner, field, "a number with 0 <= value < 1", value)


def require_non_negative(owner: str, **fields: float) -> None:
    for field, value in fields.items():
        require(_finite(value) and value >= 0, owner, field, "a finite number >= 0", value)


def require_optional_at_least(value: Any, low: int, owner: str, field: str) -> None:
    """None, or an integer >= low."""
    if value is not None:
        require_at_least(value, low, owner, field)


def _finite(value: Any) -> bool:
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def build_config(cls, data: dict | None):
    """A frozen dataclass from a plain dict, each value checked against its field's type (lists
    become tuples where the field is a tuple, numeric strings numbers)."""
    return cls(**check_fields(cls, dict(data or {})))
