"""The direct codec paths (`dumps`/`loads` walk Python objects ↔ Sereal bytes) against the tree
paths they replaced (`_native.dumps_tree`/`loads_tree`: a `sereal::Value` tree through
`sereal::Encoder`/`Decoder`, the Rust codec the Perl tests pin down): same bytes, same values,
same typed errors, on random nested data, Perl-made documents and hostile input."""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import pytest

from sluice import PerlObject, PerlRegexp, SerealError, _native
from sluice.sereal import dumps, loads, loads_many

from test_sereal import EVENTS, PERL_ENCODE, PERL_SPECIAL, perl_run

KEYS = ["type", "status", "ms", "path", "caf\u00e9", "\U0001F600", "", "k" * 40, "x", "timings"]
TEXTS = ["", "a", "WEB", "/hotel/1.html", "caf\u00e9", "\u263a" * 20, "x" * 31, "x" * 32, "y" * 300,
         "\x00\x7f", "M\u00fcnchen", "12345678901234567890123456789"]
INTS = [0, 1, 15, 16, -1, -16, -17, 127, 128, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**63, 2**64 - 1,
        2**64, -(2**63) - 1, 10**30, -(10**30)]
FLOATS = [0.0, -0.0, 0.5, 1.5, 0.1, -2.25, 1e300, 3.4e38, 1e-45, float("inf"), float("-inf")]


def random_value(rng: random.Random, depth: int = 0, exotic: bool = True) -> Any:
    """JSON-like data (plus bytes, tuples, big ints, and with `exotic` Perl objects/regexps)."""
    r = rng.random()
    if depth < 5 and r < 0.25:
        n = rng.choice([0, 1, 2, 5, 15, 16, 17, 40])
        d: dict = {}
        for _ in range(n):
            k: Any = rng.choice(KEYS) if rng.random() < 0.7 else f"k{rng.randrange(30)}"
            if rng.random() < 0.05:
                k = k.encode()
            d[k] = random_value(rng, depth + 1, exotic)
        return d
    if depth < 5 and r < 0.4:
        n = rng.choice([0, 1, 3, 15, 16, 20])
        items = [random_value(rng, depth + 1, exotic) for _ in range(n)]
        return tuple(items) if rng.random() < 0.1 else items
    pick = rng.randrange(9 if exotic else 7)
    if pick == 0:
        return rng.choice(TEXTS) if rng.random() < 0.8 else "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0x3000), rng.randrange(0x10000, 0x10FFFF)]))
            for _ in range(rng.randrange(12)))
    if pick == 1:
        return rng.choice(INTS) if rng.random() < 0.6 else rng.randrange(-(2**40), 2**40)
    if pick == 2:
        return rng.choice(FLOATS) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6)
    if pick == 3:
        return rng.choice([None, True, False])
    if pick == 4:
        return rng.choice([b"", b"abc", b"\xff\xfe", bytes(range(256)), b"caf\xc3\xa9"])
    if pick == 5:
        return bytearray(b"\xfe\x00") if rng.random() < 0.5 else memoryview(b"mv-bytes")
    if pick == 6:
        return rng.choice(TEXTS)  # repeats: dedupe material
    if pick == 7:
        return PerlObject(rng.choice(["My::Class", "Caf\u00e9::X"]), random_value(rng, depth + 1, exotic),
                          frozen=rng.random() < 0.3)
    return PerlRegexp(rng.choice(["a+b", "caf\u00e9"]), rng.choice(["", "i", "msx"]))


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 == True == 1.0 for ==, not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, PerlObject):
        return a.class_name == b.class_name and a.frozen == b.frozen and same(a.value, b.value)
    return a == b


def outcome(f: Callable[[], Any]) -> Any:
    try:
        return ("ok", f())
    except SerealError as e:
        return ("error", str(e), e.offset, e.category)


def same_outcome(a: Any, b: Any) -> bool:
    if a[0] != b[0]:
        return False
    return same(a[1], b[1]) if a[0] == "ok" else a == b


OPTIONS = [
    {}, {"protocol": 3}, {"protocol": 4}, {"dedupe": True}, {"canonical": True},
    {"canonical": True, "dedupe": True, "protocol": 3}, {"compress": "zstd", "compress_threshold": 0},
    {"compress": "zlib", "dedupe": True}, {"compress": "snappy", "compress_threshold": 64},
]


@pytest.mark.parametrize("seed", range(25))
def test_dumps_same_bytes_as_the_tree_path(seed):
    rng = random.Random(seed)
    for _ in range(25):
        v = random_value(rng)
        for opts in OPTIONS:
            assert dumps(v, **opts) == _native.dumps_tree(v, **opts), (v, opts)


@pytest.mark.parametrize("seed", range(25))
def test_loads_same_values_as_the_tree_path(seed):
    rng = random.Random(1000 + seed)
    for _ in range(25):
        v = random_value(rng)
        for opts in OPTIONS:
            doc = dumps(v, **opts)
            for binary in ("auto", "bytes", "latin1"):
                assert same(loads(doc, binary=binary), _native.loads_tree(doc, binary=binary)), (v, opts, binary)


@pytest.mark.parametrize("seed", range(10))
def test_plain_data_never_falls_back(seed):
    # JSON-like data (COPY of keys and of deduped strings included) is the direct walker's own.
    rng = random.Random(2000 + seed)
    for _ in range(25):
        v = random_value(rng, exotic=False)
        for opts in OPTIONS:
            doc = dumps(v, **opts)
            got = _native.loads_direct(doc)
            assert got is not None or v is None, (v, opts)
            assert same(got, _native.loads_tree(doc))


def test_events_and_arrays_of_events():
    data = EVENTS * 300
    for opts in OPTIONS:
        doc = dumps(data, **opts)
        assert doc == _native.dumps_tree(data, **opts)
        assert same(loads(doc), _native.loads_tree(doc))
        assert loads(doc) == data
    assert loads_many(b"".join(dumps(e) for e in data)) == data


def test_repeated_strings_are_one_object():
    doc = dumps(["a long repeated value", "a long repeated value", "a long repeated value"], dedupe=True)
    a, b, c = loads(doc)
    assert a == "a long repeated value" and b is c


def test_encode_errors_match():
    class Weird:
        pass

    cyclic: list = []
    cyclic.append(cyclic)
    deep: Any = 1
    for _ in range(600):
        deep = [deep]
    for bad in ({1: 2}, {(1,): 2}, Weird(), {1, 2}, cyclic, deep, "\ud800", {"\ud800": 1}, [1, "ok", {"k": Weird()}],
                {"a": 1, 2: 3}, PerlObject("C", Weird()), PerlRegexp(Weird(), "i")):
        for opts in ({}, {"canonical": True}, {"max_depth": 3}):
            a = outcome(lambda: dumps(bad, **opts))
            b = outcome(lambda: _native.dumps_tree(bad, **opts))
            assert a[0] == "error" and a == b, (bad, opts, a, b)


@pytest.mark.parametrize("seed", range(6))
def test_hostile_input_same_errors(seed):
    """Truncations, byte flips, lying lengths and counts: the same outcome as the tree path
    (`loads` falls back to it for anything the walker does not take), never a crash."""
    rng = random.Random(3000 + seed)
    for _ in range(30):
        v = random_value(rng)
        doc = dumps(v, **rng.choice(OPTIONS))
        cases = [doc[:rng.randrange(len(doc) + 1)], doc + b"\x00"]
        for _ in range(8):
            b = bytearray(doc)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.choice([rng.randrange(256), 0x2F, 0x28, 0x2B, 0x2A, 0x80 | 0x2A, 0x3F, 0xFF])
            cases.append(bytes(b))
        for case in cases:
            for binary in ("auto", "latin1"):
                a = outcome(lambda: loads(case, binary=binary))
                b = outcome(lambda: _native.loads_tree(case, binary=binary))
                assert same_outcome(a, b), (case, a, b)


def test_crafted_hostile_documents():
    header = b"=\xf3rl\x05\x00"
    huge = [
        header + b"\x2b\xff\xff\xff\xff\x0f",  # ARRAY of 4G elements
        header + b"\x2a\xff\xff\xff\x7f",  # HASH with a huge count
        header + b"\x26\xff\xff\xff\xff\x0f",  # BINARY of 4 GB
        header + b"\x27\xff\xff\x03abc",  # STR_UTF8 longer than the input
        header + b"\x28" * 100000 + b"\x01",  # REFN nested past the depth limit
        header + b"\x41" * 100000 + b"\x01",  # ARRAYREF_1 nested past the depth limit
        header + b"\x42\x63abc\x2f\x01",  # COPY of the array being decoded
        header + b"\x42\x63abc\x2f\x05",  # COPY pointing forward
        header + b"\x42\x2f\x01\x2f\x01",  # COPY of a COPY
        header + b"\x51\x2f\x01\x01",  # key COPY of itself
        header + b"\x51\x01\x01",  # key that is not a string
        header + b"\x3f" * 1000,  # only PAD
        header + b"\xaa\x01\x61a\x01",  # tracked hash
        header + b"\x42\x63abc\x2f\x02",  # COPY of a string, inside the doc
        header + b"\x43\x64abcd\x2f\x02\x2f\x02",  # COPY twice
    ]
    for doc in huge:
        for limits in ({}, {"max_depth": 3}, {"max_values": 2}, {"max_total_string_bytes": 5}, {"max_elements": 1}):
            a = outcome(lambda: loads(doc, **limits))
            b = outcome(lambda: _native.loads_tree(doc, **limits))
            assert same_outcome(a, b), (doc[:40], limits, a, b)


@pytest.mark.parametrize("seed", range(4))
def test_limits_same_outcome(seed):
    """Every limit, at every value around where a document crosses it: the walker accepts
    exactly what the tree path accepts."""
    rng = random.Random(4000 + seed)
    for _ in range(8):
        v = random_value(rng, exotic=False)
        doc = dumps(v, dedupe=True)
        for name in ("max_depth", "max_values", "max_total_string_bytes", "max_string_bytes", "max_elements"):
            for limit in range(0, 40, 3):
                a = outcome(lambda: loads(doc, **{name: limit}))
                b = outcome(lambda: _native.loads_tree(doc, **{name: limit}))
                assert same_outcome(a, b), (v, name, limit, a, b)


# ---- the Perl reference ------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["3", "5"])
def test_perl_vectors_decode_as_before(perl, protocol):
    special = perl_run(perl, PERL_SPECIAL, protocol)
    assert same(loads(special), _native.loads_tree(special))
    data = [{k: v for k, v in e.items() if k != "ok"} for e in EVENTS] * 5
    import json

    for dedupe in ("", "1"):
        theirs = perl_run(perl, PERL_ENCODE, protocol, dedupe, stdin=json.dumps(data).encode())
        assert _native.loads_direct(theirs) is not None
        assert same(loads(theirs), _native.loads_tree(theirs))
        assert loads(theirs) == data
