"""Options declared once: a typed default with its allowed values, read by the config check and the code.

An option is a keyword-only constructor parameter of an agent loop or a field of an estimator's options
dataclass, annotated with its range::

    max_turns: Annotated[int, AtLeast(1)] = 20
    gamma: Annotated[float, Between(0, 1)] = 0.6
    norm: Annotated[str, OneOf("std", "mean")] = "std"
    memory_dir: str | None = None          # null allowed

``declared_options`` turns such a declaration into :class:`Option` s; the config check of
``skl_verl.main`` checks a recipe's YAML against them before any worker starts, and
:class:`DeclaredOptions` checks the same values again when a loop is built by hand (tests, scripts).
No module here imports verl.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping


class ConfigError(ValueError):
    """A recipe config that cannot train; the message says which key and why."""


@dataclass(frozen=True)
class AtLeast:
    low: float


@dataclass(frozen=True)
class Above:
    """Strictly greater than ``low``."""

    low: float


@dataclass(frozen=True)
class Between:
    low: float
    high: float


class OneOf:
    def __init__(self, *choices: str):
        self.choices = tuple(choices)


@dataclass(frozen=True)
class Option:
    """One option: its type (``float``, ``int``, ``str``, ``bool``), default and allowed values."""

    kind: type
    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False
    """``null`` is allowed (and means the default behaviour)."""

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        noun = {float: "a number", int: "a whole number", str: "text", bool: "true or false"}[self.kind]
        if self.low is not None and self.high is not None:
            noun += f" in [{self.low}, {self.high}]"
        elif self.low is not None:
            noun += f" {'>' if self.low_open else '>='} {self.low}"
        return noun + (" or null" if self.optional else "")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if value is None:
            return None if self.optional else "is null"
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, str)
        if not ok:
            return f"is {value!r} ({type(value).__name__})"
        if self.choices and value not in self.choices:
            return f"is {value!r}"
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return f"is {value!r}"
        if self.high is not None and value > self.high:
            return f"is {value!r}"
        return None

    def example(self) -> str:
        value = self.choices[0] if self.choices else self.default
        return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


_KINDS = (bool, int, float, str)


def option_from_annotation(annotation: Any, default: Any) -> Option | None:
    """The :class:`Option` an annotation declares, or None when it is not an option's type."""
    metadata: list = []
    optional = False
    for _ in range(2):  # Annotated[X | None, ...] and Annotated[X, ...] | None alike
        if typing.get_origin(annotation) is typing.Annotated:
            annotation, *rest = typing.get_args(annotation)
            metadata.extend(rest)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(members) < len(typing.get_args(annotation))
            if len(members) != 1:
                return None
            annotation = members[0]
    if annotation not in _KINDS:
        return None
    fields: dict[str, Any] = {"optional": optional}
    for mark in metadata:
        if isinstance(mark, AtLeast):
            fields["low"] = mark.low
        elif isinstance(mark, Above):
            fields.update(low=mark.low, low_open=True)
        elif isinstance(mark, Between):
            fields.update(low=mark.low, high=mark.high)
        elif isinstance(mark, OneOf):
            fields["choices"] = mark.choices
    return Option(annotation, default, **fields)


def declared_options(declaration: Any) -> dict[str, Option]:
    """The options of an options dataclass (its fields), of a function (its annotated keyword-only
    parameters with defaults), or of a class (its ``__init__`` and its bases', the subclass's own
    declaration winning)."""
    if dataclasses.is_dataclass(declaration):
        hints = typing.get_type_hints(declaration, include_extras=True)
        options = {}
        for f in dataclasses.fields(declaration):
            default = f.default if f.default is not dataclasses.MISSING else None
            option = option_from_annotation(hints[f.name], default)
            if option is None:
                raise TypeError(f"{declaration.__name__}.{f.name}: {hints[f.name]} is not an option type")
            options[f.name] = option
        return options
    if inspect.isclass(declaration):
        options = {}
        for klass in reversed(inspect.getmro(declaration)):
            init = vars(klass).get("__init__")
            if init is not None and klass is not object:
                options.update(declared_options(inspect.unwrap(init)))
        return options
    function = inspect.unwrap(declaration)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError):
        return {}
    options = {}
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY or parameter.default is inspect.Parameter.empty:
            continue
        option = option_from_annotation(hints.get(parameter.name), parameter.default)
        if option is not None:
            options[parameter.name] = option
    return options


def option_error(key: str, option: Option, problem: str, hint: str = "") -> ConfigError:
    hint = f" ({hint})" if hint else ""
    return ConfigError(f"{key} {problem}: it must be {option.describe()}{hint}; e.g. {key}={option.example()}")


def unknown_option_error(prefix: str, key: str, known: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    guess = f"did you mean {prefix}.{close[0]}? " if close else ""
    return ConfigError(f"{prefix}.{key} is not an option: {guess}known: {', '.join(sorted(known))}")


def check_section(prefix: str, section: Mapping[str, Any], schema: Mapping[str, Option]) -> dict[str, Any]:
    """``section`` checked against ``schema``, defaults filled in. Raises :class:`ConfigError` naming the key."""
    for key in section:
        if key not in schema:
            raise unknown_option_error(prefix, str(key), list(schema))
    values = {}
    for key, option in schema.items():
        value = section.get(key, option.default)
        problem = option.problem(value)
        if problem:
            raise option_error(f"{prefix}.{key}", option, problem)
        values[key] = value
    return values


def build_options(options_class: type, prefix: str, section: Mapping[str, Any] | None) -> Any:
    """An instance of the options dataclass ``options_class`` from a config section, checked."""
    return options_class(**check_section(prefix, section or {}, declared_options(options_class)))


class DeclaredOptions:
    """Mixin for classes whose keyword-only ``__init__`` parameters are options: each subclass's own
    ``__init__`` checks the options it declares against their declaration before it runs."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is not None and not getattr(init, "checks_options", False):
            cls.__init__ = _checking(init, cls.__qualname__)


def _checking(init: Any, owner: str) -> Any:
    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        for key, option in declared_options(init).items():
            if key in kwargs:
                problem = option.problem(kwargs[key])
                if problem:
                    raise option_error(f"{owner}: {key}", option, problem)
        init(self, *args, **kwargs)

    checked_init.checks_options = True
    return checked_init
