"""The query string of a request, held to what its operation takes.

:class:`Query` reads the parameters :mod:`forum.node.api.parameters` declares in
their grammar (``GRAMMAR``: ASCII digits, no exponents, no ``inf``) and
refuses any other (a typo must not widen a take); the ``check_*`` functions
hold a value to its parameter's bounds, for the query string and the stream
(:mod:`forum.node.http.stream_ops`) alike.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import parse_qsl

from aiohttp import web
from multidict import MultiMapping

from forum.node.api.model import Limits
from forum.node.api.operations import Operation
from forum.node.api.parameters import GRAMMAR, TAKE_PREFIX, Parameter
from forum.node.core.entries import EntryId
from forum.node.core.space import Pattern
from forum.node.http.bodies import ApiProblem, bad_request

INTEGER = re.compile(GRAMMAR["integer"])
SIGNED = re.compile(GRAMMAR["signed"])
SECONDS = re.compile(GRAMMAR["seconds"])


class Query:
    """The query parameters of one request, checked against what its operation takes.

    An unknown parameter is refused: a typo such as ``?prefx=job-`` on a take
    would otherwise take from every prefix.
    """

    def __init__(self, request: web.Request, operation: Operation, limits: Limits) -> None:
        try:
            # aiohttp decodes the query leniently (U+FFFD for bytes that are not
            # UTF-8): prefix=%FF would quietly become another prefix.
            parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise bad_request(
                "invalid_parameter", "the query string is not UTF-8 (give bytes as prefix_b64)"
            ) from None
        self._query: MultiMapping[str] = request.query
        self._limits = limits
        self._pattern_required = TAKE_PREFIX in operation.parameters
        names = operation.names
        unknown = sorted(k for k in self._query if k not in names)
        if unknown:
            raise bad_request(
                "unknown_parameter",
                f"unknown query parameter(s): {', '.join(unknown)}; "
                f"this route takes {', '.join(sorted(names)) or 'none'}",
            )
        repeated = sorted({k for k in self._query if len(self._query.getall(k)) > 1})
        if repeated:
            raise bad_request("invalid_parameter", f"given more than once: {', '.join(repeated)}")

    def _get(self, parameter: Parameter) -> str | None:
        value: str | None = self._query.get(parameter.name)
        if value is None and parameter.required:
            raise bad_request(
                "missing_parameter",
                f"{parameter.name} is required: {parameter.describe(self._limits)}",
            )
        return value

    def text(self, parameter: Parameter) -> str | None:
        """A text parameter as given; ``None`` when absent (and not required)."""
        return self._get(parameter)

    def pattern(self) -> Pattern:
        """``prefix`` (UTF-8 text) or ``prefix_b64`` (any bytes); neither matches
        all, but where the operation takes (``TAKE_PREFIX``): there one is required."""
        text, encoded = self._query.get("prefix"), self._query.get("prefix_b64")
        if text is not None and encoded is not None:
            raise bad_request("invalid_parameter", "give prefix or prefix_b64, not both")
        if text is None and encoded is None and self._pattern_required:
            raise bad_request(
                "missing_parameter",
                "prefix is required: name what to take (prefix=job- or prefix_b64=...); "
                "prefix= (empty) takes from every prefix",
            )
        if encoded is not None:
            try:
                # validate=True: a lenient decoder drops bad characters, and an
                # empty result would match (and take) every tuple.
                return Pattern(b64url_decode(encoded))
            except (binascii.Error, ValueError) as exc:
                raise bad_request("invalid_parameter", f"prefix_b64 is not base64: {exc}") from exc
        return Pattern((text or "").encode())

    def seconds(self, parameter: Parameter) -> float:
        """Seconds in the grammar, held to :func:`check_seconds`; absent is 0."""
        text = self._get(parameter)
        if text is None:
            return 0.0
        if not SECONDS.fullmatch(text):
            raise bad_request(
                "invalid_parameter",
                f"{parameter.name} must be seconds such as 5 or 0.25, not {text!r}",
            )
        return check_seconds(parameter, float(text), self._limits)

    def integer(self, parameter: Parameter) -> int:
        text = self._get(parameter)
        if text is None:
            return parameter.default
        if not INTEGER.fullmatch(text):
            raise bad_integer(parameter, text, self._limits)
        return check_integer(parameter, int(text), self._limits)

    def entry_id(self, parameter: Parameter) -> EntryId:
        """An entry id in its text form ``origin:seq``."""
        return check_entry_id(parameter, self._get(parameter) or "")


# -- the checks of a parameter's value, shared by the query string and the stream --


def check_seconds(parameter: Parameter, value: float, limits: Limits) -> float:
    """A ``wait`` is cut to its maximum (absent or 0: answer at once); a
    ``lease`` is refused past it."""
    maximum = parameter.bound(limits)
    if parameter.cut:
        if not value >= 0:  # NaN too
            raise bad_request("invalid_parameter", f"{parameter.name} must be >= 0 s")
        return min(value, maximum)
    if not 0 < value <= maximum:
        raise bad_request("invalid_parameter", f"{parameter.name} must be > 0 and <= {maximum:g} s")
    return value


def check_integer(parameter: Parameter, value: int, limits: Limits) -> int:
    if not parameter.minimum <= value <= int(parameter.bound(limits)):
        raise bad_integer(parameter, value, limits)
    return value


def bad_integer(parameter: Parameter, value: object, limits: Limits) -> ApiProblem:
    lo, hi = parameter.minimum, int(parameter.bound(limits))
    return bad_request(
        "invalid_parameter", f"{parameter.name} must be an integer from {lo} to {hi}, not {value!r}"
    )


def check_entry_id(parameter: Parameter, text: str) -> EntryId:
    try:
        return EntryId.parse(text)
    except ValueError as exc:
        raise bad_request("invalid_parameter", f"{parameter.name}: {exc}") from exc


def b64url_decode(text: str) -> bytes:
    """URL-safe base64, padded or not (``binascii.Error`` for anything else:
    a lenient decoder drops bad characters, and an empty result would match,
    and take, every tuple)."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
