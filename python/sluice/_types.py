"""Exceptions and the small wrapper types of the Sereal mapping, shared by every module.

They are defined in Python (documented, picklable, easy to subclass) and registered with the
native module, which creates and recognises them.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _native

__all__ = ["SluiceError", "SerealError", "ReadError", "PerlObject", "PerlRegexp"]


class SluiceError(Exception):
    """Base class of every error the ``sluice`` package raises."""


class SerealError(SluiceError, ValueError):
    """Any Sereal encoding or decoding failure.

    Attributes:
        offset: byte offset in the document where decoding failed (for a compressed document:
            in the decompressed body, counted after the header); ``None`` for encoding errors.
        category: ``"eof"`` (the input ended early: a truncated document), ``"invalid"`` (not a
            valid document), ``"limit"`` (a decoder limit stopped it) or ``"encode"`` (the value
            cannot be encoded, or bad options).
    """

    offset: Optional[int] = None
    category: str = "invalid"


class ReadError(SluiceError):
    """A read or tail could not start or go on: no such data directory, the directory is owned
    by a running server, a bad filter expression, the server refused the request."""


class PerlObject:
    """A blessed Perl value: the class name and the blessed data.

    ``frozen`` is true for ``OBJECT_FREEZE`` (a Perl decoder would call ``Class->THAW``; the
    value is then the list that ``FREEZE`` returned).
    """

    __slots__ = ("class_name", "value", "frozen")

    def __init__(self, class_name: str, value: Any, frozen: bool = False) -> None:
        self.class_name = class_name
        self.value = value
        self.frozen = frozen

    def __repr__(self) -> str:
        f = ", frozen=True" if self.frozen else ""
        return f"PerlObject({self.class_name!r}, {self.value!r}{f})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PerlObject):
            return NotImplemented
        return (self.class_name, self.value, self.frozen) == (other.class_name, other.value, other.frozen)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dicts it usually wraps


class PerlRegexp:
    """A Perl regular expression (``qr/pattern/flags``)."""

    __slots__ = ("pattern", "flags")

    def __init__(self, pattern: str, flags: str = "") -> None:
        self.pattern = pattern
        self.flags = flags

    def __repr__(self) -> str:
        return f"PerlRegexp({self.pattern!r}, {self.flags!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PerlRegexp):
            return NotImplemented
        return (self.pattern, self.flags) == (other.pattern, other.flags)

    def __hash__(self) -> int:
        return hash((self.pattern, self.flags))


_native.register_types(SerealError, ReadError, PerlObject, PerlRegexp)
