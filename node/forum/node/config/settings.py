"""One loader for settings: a frozen dataclass, filled from layers of raw values.

``NodeConfig`` (flags, ``FORUM_*``, a TOML file) and ``ReplicationConfig``
(``FORUM_REPL_*``) are read by the same code, and no field has code of its
own: a field's annotation says everything the loader needs.

* Its type, into which msgspec (``convert(..., strict=False)``) coerces a
  TOML value or the text of a variable or flag: ``"5"`` to 5, ``"0.2"`` to
  0.2, ``"always"`` to a ``Literal``. Text for a tuple is comma-separated.
* Its bounds and a description, as ``msgspec.Meta``: msgspec checks the
  bounds, the description words the refusal
  (``max_batch must be a positive integer, not '0'``). The shared ones are
  below: :data:`PositiveInt`, :data:`Seconds`, :data:`PositiveSeconds`,
  :data:`Size`.
* Text for a tuple is comma-separated; for a dict, ``key=value`` pairs
  comma-separated (``job/=100,mail/=5``).
* :data:`SIZE`, for text with a unit (``"64MiB"``), parsed before msgspec sees it.
* :data:`HIDDEN`, for a secret: a refusal does not show the value.
* :class:`Check`, for what a bound cannot say (an http(s) URL, ``HOST:PORT``);
  its ``ValueError`` is the refusal, so its message names the key.

The class's ``__post_init__`` calls :func:`check_fields` (a value built in
code is held to the same rules) and then checks what involves two fields,
raising :class:`SettingError` naming both.

:func:`build` merges :class:`Layer` s key by key, later ones winning, and
judges the merged value once, so a file's ``max_payload`` may lean on a
flag's ``segment_bytes``. Every refusal, an unknown key included, is one
line that starts with where the value came from, e.g.::

    FORUM_MAX_WAIT: max_wait must be a finite number of seconds >= 0, not 'soon'
    node.toml: unknown config key 'max_wiat' (did you mean 'max_wait'?)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import string
import sys
import tomllib
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    Protocol,
    TypeVar,
    Union,
    get_args,
    get_origin,
)
from typing import get_type_hints as _type_hints

import msgspec
from msgspec import Meta


class DataclassInstance(Protocol):
    """A dataclass instance, as ``dataclasses.replace`` takes (typeshed's, which
    cannot be imported at run time)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


S = TypeVar("S", bound=DataclassInstance)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: The largest float: a bound that refuses ``inf`` (msgspec's bounds must be finite).
_FINITE = sys.float_info.max


class SettingError(ValueError):
    """A refused setting. ``keys`` are the fields it is about, so :func:`build`
    can say where each of them came from."""

    def __init__(self, message: str, *keys: str) -> None:
        super().__init__(message)
        self.keys = keys


@dataclass(frozen=True, slots=True)
class Check:
    """A field's rule beyond its type and bounds: ``rule(value)`` raises
    ``ValueError`` with the whole refusal (naming the key)."""

    rule: Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class Hidden:
    """Marks a field whose value no message may show (a secret)."""


HIDDEN = Hidden()


@dataclass(frozen=True, slots=True)
class Units:
    """Text as a number with an optional unit suffix (case and ``_`` ignored)."""

    factors: Mapping[str, int]

    def parse(self, text: str) -> int:
        compact = text.lower().replace("_", "")
        number = compact.rstrip(string.ascii_lowercase)
        unit = compact[len(number) :]
        if unit not in self.factors:
            raise ValueError(f"unknown unit {unit!r}")
        return int(number.strip()) * self.factors[unit]


#: Sizes in bytes: ``4096``, ``512KiB``, ``64M``, ``1GiB``.
SIZE = Units({"": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB})
SIZE_TEXT = "optionally with a unit: KiB, MiB or GiB"

PositiveInt = Annotated[int, Meta(ge=1, description="a positive integer")]
Size = Annotated[int, Meta(ge=1, description=f"a positive integer of bytes, {SIZE_TEXT}"), SIZE]
Seconds = Annotated[float, Meta(ge=0, le=_FINITE, description="a finite number of seconds >= 0")]
PositiveSeconds = Annotated[
    float, Meta(gt=0, le=_FINITE, description="a finite number of seconds > 0")
]


# -- layers ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Layer:
    """Raw values by key (``-`` may stand for ``_``) from one source, and how
    that source names a key, for messages: where it came from (``origin``)
    and how to write it there (``spell``, for "did you mean")."""

    values: Mapping[str, object]
    origin: Callable[[str], str]
    spell: Callable[[str], str] = repr

    @classmethod
    def named(cls, values: Mapping[str, object], source: str) -> Layer:
        """Values whose origin is ``source`` whatever the key (``"flags"``, a file)."""
        return cls(values, lambda key: source)

    @classmethod
    def environment(
        cls, env: Mapping[str, str], prefix: str, skip: Callable[[str], bool] = lambda name: False
    ) -> Layer:
        """Every ``<prefix><KEY>`` variable in ``env`` but those ``skip`` names:
        a key that is no field is then refused, not ignored."""
        names = {
            name[len(prefix) :].lower(): name
            for name in env
            if name.startswith(prefix) and not skip(name)
        }

        def spell(key: str) -> str:
            return names.get(key, f"{prefix}{key.upper()}")

        return cls({key: env[name] for key, name in names.items()}, spell, spell)

    @classmethod
    def toml_file(cls, path: str | os.PathLike[str]) -> Layer:
        return cls.named(read_toml(path), str(path))


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"config file {path} is not valid TOML: not UTF-8 at byte {exc.start}"
        ) from None


def build(cls: type[S], layers: Iterable[Layer], base: S | None = None) -> S:
    """``base`` (or the defaults) with the layers applied key by key, later
    ones winning; each value is coerced as its layer gives it, and the whole
    is judged once at the end."""
    fields = _fields(cls)
    values: dict[str, object] = {}
    origins: dict[str, str] = {}
    for layer in layers:
        for raw_key, raw in layer.values.items():
            key = raw_key.replace("-", "_")
            origin = layer.origin(key)
            field = fields.get(key)
            if field is None:
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f" (did you mean {layer.spell(close[0])}?)" if close else ""
                raise SettingError(f"{origin}: unknown config key {raw_key!r}{hint}", key)
            try:
                values[key] = field.coerce(raw)
            except SettingError as exc:
                raise SettingError(f"{origin}: {exc}", key) from None
            origins[key] = origin
    try:
        return dataclasses.replace(base, **values) if base is not None else cls(**values)
    except SettingError as exc:
        # What two fields refuse together: say where each that was given came from.
        where = ", ".join(dict.fromkeys(origins[key] for key in exc.keys if key in origins))
        raise SettingError(f"{where}: {exc}" if where else str(exc), *exc.keys) from None


def check_fields(settings: DataclassInstance) -> None:
    """Hold each field of ``settings`` to its annotation (for ``__post_init__``)."""
    for name, field in _fields(type(settings)).items():
        field.check(getattr(settings, name))


# -- one field ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    """What the loader reads from one field's annotation."""

    name: str
    hint: Any
    description: str | None
    units: Units | None
    checks: tuple[Check, ...]
    hidden: bool
    #: The type (``None`` aside) is ``str``: text is taken as it is, not stripped.
    text: bool
    #: The type is a tuple: text for it is comma-separated.
    sequence: bool
    #: The type is a dict: text for it is comma-separated ``key=value`` pairs.
    mapping: bool = False

    def coerce(self, raw: object) -> object:
        """``raw`` (a TOML value, or text) as this field's type."""
        value = raw
        try:
            if isinstance(raw, str) and not self.text:
                value = raw.strip()
                if self.units is not None:
                    value = self.units.parse(value)
                elif self.sequence:
                    value = [part.strip() for part in value.split(",") if part.strip()]
                elif self.mapping:
                    value = _pairs(value)
            value = msgspec.convert(value, self.hint, strict=False, dec_hook=_dec_hook)
        except (msgspec.ValidationError, ValueError) as exc:
            raise self.refusal(raw, exc) from None
        self.check_rules(value)
        return value

    def check(self, value: object) -> None:
        try:
            msgspec.convert(value, self.hint, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            raise self.refusal(value, exc) from None
        self.check_rules(value)

    def check_rules(self, value: object) -> None:
        if value is None:
            return
        for check in self.checks:
            try:
                check.rule(value)
            except ValueError as exc:
                raise SettingError(str(exc), self.name) from None

    def refusal(self, raw: object, exc: Exception) -> SettingError:
        if self.description is None:
            message = f"{self.name}: {exc}"
        else:
            message = f"{self.name} must be {self.description}"
        if self.hidden:
            return SettingError(message, self.name)
        shown = repr(raw)
        shown = shown if len(shown) <= 80 else f"{shown[:77]}..."
        return SettingError(f"{message}, not {shown}", self.name)


@functools.cache
def _fields(cls: type[Any]) -> dict[str, _Field]:
    hints = _type_hints(cls, include_extras=True)
    return {f.name: _read_field(f.name, hints[f.name]) for f in dataclasses.fields(cls)}


def _read_field(name: str, hint: Any) -> _Field:
    inner = hint
    if get_origin(hint) in (Union, types.UnionType):
        arms = [arm for arm in get_args(hint) if arm is not type(None)]
        if len(arms) == 1:
            inner = arms[0]
    base: Any = inner
    extras: tuple[Any, ...] = ()
    if get_origin(inner) is Annotated:
        base, *rest = get_args(inner)
        extras = tuple(rest)
    description = next((e.description for e in extras if isinstance(e, Meta)), None)
    if description is None and get_origin(base) is Literal:
        *most, last = (str(choice) for choice in get_args(base))
        description = f"{', '.join(most)} or {last}" if most else last
    return _Field(
        name=name,
        hint=hint,
        description=description,
        units=next((e for e in extras if isinstance(e, Units)), None),
        checks=tuple(e for e in extras if isinstance(e, Check)),
        hidden=HIDDEN in extras,
        text=base is str,
        sequence=get_origin(base) is tuple,
        mapping=get_origin(base) is dict,
    )


def _pairs(text: str) -> dict[str, object]:
    """``a=1,b=2`` as ``{"a": 1, "b": 2}``: the last ``=`` of each splits it,
    and a value of digits is a number (a key may hold ``=``, not ``,``)."""
    pairs: dict[str, object] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.rpartition("=")
        if not sep:
            raise ValueError(f"{part!r} is not KEY=VALUE")
        value = value.strip()
        pairs[key.strip()] = int(value) if value.lstrip("-").isdigit() else value
    return pairs


def _dec_hook(type_: type, obj: object) -> object:
    """What msgspec does not convert itself: paths."""
    if type_ is Path and isinstance(obj, str | os.PathLike):
        if not os.fspath(obj):
            raise ValueError("an empty path")
        return Path(obj)
    raise TypeError(f"Expected `{type_.__name__}`, got `{type(obj).__name__}`")
