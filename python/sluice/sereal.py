"""Sereal encoding and decoding with the Rust codec (``crates/sereal``).

The mapping between Python values and Sereal:

=====================================  ==========================================================
Python                                 Sereal
=====================================  ==========================================================
``None``                               ``UNDEF``
``bool``                               ``TRUE``/``FALSE`` (protocol 3, 4), ``YES``/``NO`` (5)
``int`` (64-bit signed or unsigned)    ``POS``/``NEG``/``VARINT``/``ZIGZAG``
``int`` beyond 64 bits                 its decimal text as a string (Sereal has no big
                                       integers; Perl reads the text as that number)
``float``                              ``FLOAT`` when exact in 32 bits, else ``DOUBLE``
``str``                                ASCII as ``SHORT_BINARY``/``BINARY`` (as Perl writes it),
                                       anything else as ``STR_UTF8``
``bytes``/``bytearray``/``memoryview``  ``BINARY``
``dict`` (keys ``str`` or ``bytes``)   hash, keys in insertion order (``canonical`` sorts them)
``list``/``tuple``                     array
:class:`PerlObject`                    ``OBJECT``/``OBJECTV`` (``_FREEZE`` when ``frozen``)
:class:`PerlRegexp`                    ``qr//``: ``OBJECT "Regexp"`` + ``REFN REGEXP``
=====================================  ==========================================================

Decoding gives back the same types, with: a binary string (``BINARY``, as Perl writes any
string without the UTF-8 flag) is ``str`` when it is valid UTF-8 and ``bytes`` otherwise
(``binary="bytes"``: always ``bytes``; ``binary="latin1"``: always ``str``, one character per
byte, as Perl sees it); a reference to a scalar is the scalar; a value referenced from several
places (``REFP``/``ALIAS``) is a copy at each place; weak references are strong. Any other type
is refused with :class:`SerealError` (category ``"encode"``).

Every failure is a :class:`SerealError` with ``offset`` and ``category``. ``loads`` enforces the
same limits as the Rust decoder, with the same defaults (each can be lowered or raised).
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Union

from . import _native
from ._types import PerlObject, PerlRegexp, SerealError

__all__ = ["dumps", "loads", "loads_many", "SerealError", "PerlObject", "PerlRegexp"]

Buffer = Union[bytes, bytearray, memoryview]
Compress = Optional[Literal["snappy", "zlib", "zstd"]]
BinaryMode = Literal["auto", "bytes", "latin1"]


def dumps(
    obj: Any,
    *,
    protocol: int = 5,
    compress: Compress = None,
    level: Optional[int] = None,
    dedupe: bool = False,
    canonical: bool = False,
    compress_threshold: int = 1024,
    max_depth: int = 512,
) -> bytes:
    """Encode ``obj`` as one Sereal document.

    Args:
        obj: the value (see the module docs for the mapping).
        protocol: 3, 4 or 5 (zstd needs 4 or later).
        compress: ``None``, ``"snappy"``, ``"zlib"`` (levels 1-9, default 6) or ``"zstd"``
            (levels -7 to 22, default 3). Bodies under ``compress_threshold`` bytes, or that do
            not shrink, are written uncompressed (as the Perl encoder does).
        level: the compression level.
        dedupe: write repeated string values (longer than 3 bytes) once and ``COPY`` them
            (hash keys are always de-duplicated).
        canonical: sort hash keys (as Perl's ``sort_keys``) for stable output.
        max_depth: deepest nesting accepted (a reference cycle hits it).

    Without ``compress``/``dedupe`` the bytes are identical to ``Sereal::Encoder``'s for the
    same data and protocol.

    Raises:
        SerealError: an unsupported type, a non-``str``/``bytes`` dict key, too deep, bad options.
    """
    return _native.dumps(
        obj,
        protocol=protocol,
        compress=compress,
        level=level,
        dedupe=dedupe,
        canonical=canonical,
        compress_threshold=compress_threshold,
        max_depth=max_depth,
    )


def loads(
    data: Buffer,
    *,
    binary: BinaryMode = "auto",
    max_depth: Optional[int] = None,
    max_decompressed_bytes: Optional[int] = None,
    max_string_bytes: Optional[int] = None,
    max_elements: Optional[int] = None,
    max_values: Optional[int] = None,
    max_total_string_bytes: Optional[int] = None,
) -> Any:
    """Decode the Sereal document that makes up all of ``data``.

    Args:
        data: the document (any protocol 1-5, raw, Snappy, zlib or zstd).
        binary: how binary strings come out: ``"auto"`` (``str`` if valid UTF-8, else
            ``bytes``), ``"bytes"`` or ``"latin1"``.
        max_depth: deepest nesting (default 512).
        max_decompressed_bytes: largest decompressed body (default 256 MiB).
        max_string_bytes: longest single string (default 64 MiB).
        max_elements: most elements in one array or hash (default 8 Mi).
        max_values: most values in the document, ``COPY`` re-reads included (default 8 Mi).
        max_total_string_bytes: most string bytes in the document (default 256 MiB).

    Raises:
        SerealError: with ``offset`` and ``category`` (``"eof"`` for a truncated document,
            ``"limit"`` when a limit stopped decoding, ``"invalid"`` otherwise), also for
            trailing bytes after the document.
    """
    return _native.loads(
        data,
        binary=binary,
        max_depth=max_depth,
        max_decompressed_bytes=max_decompressed_bytes,
        max_string_bytes=max_string_bytes,
        max_elements=max_elements,
        max_values=max_values,
        max_total_string_bytes=max_total_string_bytes,
    )


def loads_many(data: Buffer, *, binary: BinaryMode = "auto", **limits: Optional[int]) -> List[Any]:
    """Decode concatenated documents (e.g. ``GET /v1/events?format=sereal``, or
    ``sluice cat --format sereal``): a list of their bodies. Takes the limits of :func:`loads`;
    a :class:`SerealError`'s offset counts from the start of ``data``."""
    return _native.loads_many(data, binary=binary, **limits)
