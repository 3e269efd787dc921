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

from typing import TYPE_CHECKING, Any, List, Literal, Optional, Union

from . import _native
from ._types import PerlObject, PerlRegexp, SerealError

__all__ = ["dumps", "loads", "loads_many", "SerealError", "PerlObject", "PerlRegexp"]

Buffer = Union[bytes, bytearray, memoryview]
Compress = Optional[Literal["snappy", "zlib", "zstd"]]
BinaryMode = Literal["auto", "bytes", "latin1"]


if TYPE_CHECKING:
    # The signatures, for type checkers; the documentation is on the native functions.

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
        """Encode ``obj`` as one Sereal document."""

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
        """Decode the Sereal document that makes up all of ``data``."""

else:
    # The native functions themselves (their docstrings say what a Python wrapper said): a
    # wrapper's call and keyword forwarding cost ~140 ns per call, a third of encoding an event.
    dumps = _native.dumps
    loads = _native.loads


def loads_many(data: Buffer, *, binary: BinaryMode = "auto", **limits: Optional[int]) -> List[Any]:
    """Decode concatenated documents (e.g. ``GET /v1/events?format=sereal``, or
    ``sluice cat --format sereal``): a list of their bodies. Takes the limits of :func:`loads`;
    a :class:`SerealError`'s offset counts from the start of ``data``."""
    return _native.loads_many(data, binary=binary, **limits)
