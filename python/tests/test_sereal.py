"""sluice.sereal: the mapping, errors and limits; round trips Python ↔ Rust CLI ↔ Perl reference."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path

import pytest

import sluice
from sluice import PerlObject, PerlRegexp, SerealError
from sluice.sereal import dumps, loads, loads_many

from conftest import sluice_bin

EVENTS = [
    {"type": "WEB", "path": "/search?q=caf\u00e9", "status": 200, "ms": 12.5, "ok": True,
     "tags": ["a", "b", "a"], "user": None, "n": -3, "big": 2**62, "nested": {"x": [1, {"y": "z"}]}},
    {"type": "WEB", "path": "/", "status": 503, "ms": 0.25, "ok": False, "tags": [], "user": "u1",
     "n": 0, "big": -(2**62), "nested": {}},
]


@pytest.mark.parametrize(
    "value",
    [
        None, True, False, 0, 1, 15, 16, -1, -16, -17, 2**31, 2**63 - 1, -(2**63), 2**64 - 1,
        0.0, 1.5, -2.25, 1e300, 0.1, float("inf"), float("-inf"), "", "a", "x" * 31, "x" * 32,
        "\u00e9t\u00e9", "\U0001F600", "\x00", [], [1, [2, [3]]], {}, {"a": 1, "b": [1, 2]},
        {"": ""}, EVENTS, list(range(100)), {str(i): i for i in range(40)},
    ],
)
@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_round_trip(value, protocol):
    assert loads(dumps(value, protocol=protocol)) == value


def test_mapping_edges():
    assert math.isnan(loads(dumps(float("nan"))))
    # A tuple is an array; bytes that are not UTF-8 stay bytes; UTF-8 bytes come back as str.
    assert loads(dumps((1, 2))) == [1, 2]
    assert loads(dumps(b"\xff\x00")) == b"\xff\x00"
    assert loads(dumps(b"abc")) == "abc"
    assert loads(dumps(bytearray(b"\xfe"))) == b"\xfe"
    assert loads(dumps(memoryview(b"\xfe"))) == b"\xfe"
    # binary= modes
    assert loads(dumps(b"abc"), binary="bytes") == b"abc"
    assert loads(dumps(b"caf\xe9"), binary="latin1") == "caf\u00e9"
    assert loads(dumps({b"\xff": 1})) == {b"\xff": 1}
    assert loads(dumps({b"k": 1})) == {"k": 1}
    # Ints beyond 64 bits: decimal text (Sereal has no big integers).
    assert loads(dumps(2**64)) == str(2**64)
    assert loads(dumps(-(2**63) - 1)) == str(-(2**63) - 1)
    # bool is not an int on the wire.
    assert loads(dumps([True, 1])) == [True, 1]
    assert type(loads(dumps(True))) is bool
    # Key order is kept; canonical sorts by (length, bytes).
    assert list(loads(dumps({"b": 1, "a": 2}))) == ["b", "a"]
    assert list(loads(dumps({"bb": 1, "a": 2, "c": 3}, canonical=True))) == ["a", "c", "bb"]
    # Perl objects and regexps keep their class / flags.
    obj = PerlObject("My::Class", {"id": 7})
    assert loads(dumps(obj)) == obj
    assert loads(dumps(PerlObject("F", [1], frozen=True))).frozen is True
    assert loads(dumps([obj, obj])) == [obj, obj]
    assert loads(dumps(PerlRegexp("a+b", "i"))) == PerlRegexp("a+b", "i")
    # Subclasses of the basic types map as their base.
    class D(dict):
        pass

    class S(str):
        pass

    assert loads(dumps(D(a=S("x")))) == {"a": "x"}


def test_encode_errors():
    with pytest.raises(SerealError) as e:
        dumps({1: 2})
    assert e.value.category == "encode" and e.value.offset is None
    with pytest.raises(SerealError, match="cannot encode"):
        dumps(object())
    with pytest.raises(SerealError, match="cannot encode"):
        dumps({1, 2})
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(SerealError, match="nesting deeper"):
        dumps(cyclic)
    with pytest.raises(SerealError):
        dumps(1, protocol=2)
    with pytest.raises(SerealError):
        dumps(1, compress="lz4")  # type: ignore[arg-type]
    with pytest.raises(SerealError):
        dumps(1, protocol=3, compress="zstd")
    with pytest.raises(SerealError):
        dumps("\ud800")  # a lone surrogate is not encodable as UTF-8
    assert issubclass(SerealError, ValueError) and issubclass(SerealError, sluice.SluiceError)


def test_decode_errors_have_offsets():
    doc = dumps(EVENTS)
    # Every truncated prefix fails as "eof" with an offset inside the document.
    for n in range(len(doc)):
        with pytest.raises(SerealError) as e:
            loads(doc[:n])
        assert e.value.category == "eof", n
        assert 0 <= e.value.offset <= len(doc)
    with pytest.raises(SerealError) as e:
        loads(b"not sereal at all")
    assert e.value.category == "invalid" and e.value.offset == 0
    with pytest.raises(SerealError, match="trailing"):
        loads(doc + b"\x00\x00")


def test_hostile_input_never_crashes():
    rng = random.Random(4)
    doc = dumps(EVENTS, compress="zstd", compress_threshold=0)
    for _ in range(3000):
        b = bytearray(doc)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        try:
            loads(bytes(b))
        except SerealError:
            pass


def test_limits_like_the_rust_decoder():
    deep = dumps([[[[[1]]]]])
    assert loads(deep, max_depth=5) == [[[[[1]]]]]
    with pytest.raises(SerealError) as e:
        loads(deep, max_depth=4)
    assert e.value.category == "limit"
    with pytest.raises(SerealError, match="limit"):
        loads(dumps("x" * 100), max_string_bytes=99)
    with pytest.raises(SerealError, match="limit"):
        loads(dumps(list(range(20))), max_elements=19)
    with pytest.raises(SerealError, match="limit"):
        loads(dumps(list(range(10))), max_values=5)
    big = dumps("x" * 5000, compress="zstd")
    with pytest.raises(SerealError, match="decompressed"):
        loads(big, max_decompressed_bytes=1000)


@pytest.mark.parametrize("compress,level", [("snappy", None), ("zlib", None), ("zlib", 9), ("zstd", None), ("zstd", 19)])
def test_compression(compress, level):
    data = EVENTS * 50
    doc = dumps(data, compress=compress, level=level, dedupe=True)
    assert len(doc) < len(dumps(data))
    assert loads(doc) == data


def test_loads_many():
    docs = b"".join(dumps(e) for e in EVENTS)
    assert loads_many(docs) == EVENTS
    with pytest.raises(SerealError) as e:
        loads_many(docs[:-1])
    assert e.value.category == "eof"


# ---- Rust CLI ----------------------------------------------------------------------------------

def test_rust_cli_round_trip(tmp_path: Path):
    text = json.dumps(EVENTS)
    for protocol in ("3", "5"):
        rust = subprocess.run(
            [sluice_bin(), "sereal", "encode", "--protocol", protocol, "-"], input=text.encode(), capture_output=True, check=True
        ).stdout
        assert rust == dumps(EVENTS, protocol=int(protocol))
        assert loads(rust) == EVENTS
    f = tmp_path / "py.srl"
    f.write_bytes(dumps(EVENTS, compress="zstd", dedupe=True, compress_threshold=0))
    out = subprocess.run([sluice_bin(), "sereal", "decode", str(f)], capture_output=True, check=True).stdout
    assert json.loads(out) == EVENTS


# ---- the Perl reference ------------------------------------------------------------------------

PERL_DECODE = r'''
use strict; use Sereal::Decoder; use JSON::XS;
local $/; open my $fh, "<:raw", $ARGV[0] or die; my $doc = <$fh>;
my $v = Sereal::Decoder->new->decode($doc);
binmode STDOUT; print JSON::XS->new->utf8->canonical->allow_nonref->allow_blessed->convert_blessed->encode($v);
'''

PERL_ENCODE = r'''
use strict; use Sereal::Encoder; use JSON::XS;
local $/; my $json = <STDIN>; my $v = JSON::XS->new->allow_nonref->decode($json);
my %o = (protocol_version => $ARGV[0]);
$o{dedupe_strings} = 1 if $ARGV[1];
$o{canonical} = 1;
binmode STDOUT; print Sereal::Encoder->new(\%o)->encode($v);
'''


def perl_run(perl: str, script: str, *args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run([perl, "-e", script, *args], input=stdin, capture_output=True, check=True).stdout


@pytest.mark.parametrize("protocol", [3, 4, 5])
@pytest.mark.parametrize("opts", [{}, {"dedupe": True}, {"compress": "zlib"}, {"compress": "snappy"}, {"compress": "zstd"}])
def test_perl_decodes_ours(perl, tmp_path: Path, protocol, opts):
    if opts.get("compress") == "zstd" and protocol < 4:
        pytest.skip("zstd needs protocol 4")
    # Booleans aside (Perl's JSON shows them as 1 / ""; test_perl_special_values has them).
    data = [{k: v for k, v in e.items() if k != "ok"} for e in EVENTS] * 20
    f = tmp_path / "doc.srl"
    f.write_bytes(dumps(data, protocol=protocol, compress_threshold=0, **opts))
    assert json.loads(perl_run(perl, PERL_DECODE, str(f))) == data


@pytest.mark.parametrize("protocol", ["3", "5"])
@pytest.mark.parametrize("dedupe", ["", "1"])
def test_same_bytes_as_perl(perl, protocol, dedupe):
    data = [{k: v for k, v in e.items() if k not in ("ok",)} for e in EVENTS] * 5
    theirs = perl_run(perl, PERL_ENCODE, protocol, dedupe, stdin=json.dumps(data).encode())
    # Canonical on both sides: a Perl hash has no insertion order to compare.
    ours = dumps(data, protocol=int(protocol), dedupe=bool(dedupe), canonical=True)
    assert ours == theirs
    assert loads(theirs) == data


PERL_SPECIAL = r'''
use strict; use Sereal::Encoder;
my $obj = bless { id => 7, name => "x" }, "My::Class";
my $v = {
  obj => $obj, again => $obj, re => qr/a+b/i, sref => \ "pointed", undef => undef,
  bin => "\xff\xfe", utf8 => "caf\x{e9}\x{263a}", big => 18446744073709551615, neg => -42,
  float => 0.5, list => [1, "two", 3.25], empty => {}, str_num => "10",
};
binmode STDOUT; print Sereal::Encoder->new({protocol_version => $ARGV[0]})->encode($v);
'''


@pytest.mark.parametrize("protocol", ["3", "5"])
def test_perl_special_values(perl, protocol):
    v = loads(perl_run(perl, PERL_SPECIAL, protocol))
    # The object is written once (OBJECT) and then referenced (REFP to its hash); the model keeps
    # the class at the place it was written, the plain data at the other.
    objs = [v["obj"], v["again"]]
    assert PerlObject("My::Class", {"id": 7, "name": "x"}) in objs
    assert {"id": 7, "name": "x"} in objs
    assert v["re"] == PerlRegexp("a+b", "i")
    assert v["sref"] == "pointed"
    assert v["undef"] is None
    assert v["bin"] == b"\xff\xfe"
    assert v["utf8"] == "caf\u00e9\u263a"
    assert v["big"] == 2**64 - 1
    assert v["neg"] == -42 and v["float"] == 0.5
    assert v["list"] == [1, "two", 3.25] and v["empty"] == {} and v["str_num"] == "10"
    # And back to Perl: objects keep their class.
    again = dumps(v, protocol=int(protocol))
    check = r'''
use strict; use Sereal::Decoder; local $/; my $v = Sereal::Decoder->new->decode(<STDIN>);
my ($class) = grep { $_ ne "HASH" } ref($v->{obj}), ref($v->{again});
print $class, " ", $v->{obj}{id}, " ", ref($v->{re}), " ", ($v->{bin} eq "\xff\xfe" ? "bin-ok" : "bin-bad"), " ", $v->{big};
'''
    assert perl_run(perl, check, stdin=again).decode() == "My::Class 7 Regexp bin-ok 18446744073709551615"
