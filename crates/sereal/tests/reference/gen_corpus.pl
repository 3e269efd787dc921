#!/usr/bin/perl
# gen_corpus.pl OUTDIR
#
# Generates the reference test corpus for the Rust Sereal codec using the
# Perl reference implementation (Sereal::Encoder / Sereal::Decoder):
#
#   OUTDIR/decode/<name>.srl          document made by Sereal::Encoder
#   OUTDIR/decode/<name>.expect.json  what Sereal::Decoder decodes it to
#                                     (rendered by Render.pm)
#   OUTDIR/decode/<name>.header.json  user header (header cases only)
#   OUTDIR/encode/<name>.json         JSON data, object keys in the order the
#                                     (non-canonical) reference encoder emits
#                                     them (see sereal_order below)
#   OUTDIR/encode/<name>.srl          reference encoding of that data
#   OUTDIR/encode/<name>.opts         encoder options used
#   OUTDIR/MANIFEST                   "decode|encode <name> <description>"
#
# Output is deterministic: fixed srand seeds and a fixed perl hash seed
# (the script re-executes itself with PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0
# if they are not already set that way).
BEGIN {
    if (   ($ENV{PERL_HASH_SEED} // '') ne '0'
        || ($ENV{PERL_PERTURB_KEYS} // '') ne '0')
    {
        $ENV{PERL_HASH_SEED}    = '0';
        $ENV{PERL_PERTURB_KEYS} = '0';
        exec($^X, $0, @ARGV) or die "gen_corpus.pl: cannot re-exec $^X: $!\n";
    }
}
use strict;
use warnings;
no warnings 'experimental::builtin';
no warnings 'recursion';
use FindBin;
use lib $FindBin::Bin;
use Render;
use B ();
use Sereal::Encoder qw(SRL_UNCOMPRESSED SRL_SNAPPY SRL_ZLIB SRL_ZSTD
    encode_sereal_with_header_data);
use Sereal::Decoder ();
use JSON::XS ();
use MIME::Base64 ();
use Scalar::Util qw(weaken blessed reftype dualvar);
use File::Path qw(make_path remove_tree);
use Time::HiRes ();

my $OUT = shift @ARGV or die "usage: $0 OUTDIR\n";
my $T0  = Time::HiRes::time();

remove_tree("$OUT/decode", "$OUT/encode");
unlink "$OUT/MANIFEST";
make_path("$OUT/decode", "$OUT/encode");

my @MANIFEST;
my %STATS = (decode => 0, encode => 0, skipped => 0, dup => 0);
my @SKIPPED;
# NB: Sereal::Decoder 5.003 corrupts refcounts (-> "Attempt to free
# unreferenced scalar", segfaults) when one decoder object is reused with the
# two-argument decode($srl, $out) form after an OBJECT_FREEZE/THAW document.
# So: a fresh decoder per document, and the one-argument form.
sub DEC { Sereal::Decoder->new }

sub write_file {
    my ($path, $bytes) = @_;
    open my $fh, '>:raw', $path or die "open $path: $!";
    print {$fh} $bytes or die "write $path: $!";
    close $fh or die "close $path: $!";
}

sub seed_for {    # deterministic per-name seed
    my ($name) = @_;
    my $h = 5381;
    $h = (($h * 33) ^ ord($_)) & 0x7fffffff for split //, $name;
    return $h;
}

sub upgraded { my $s = shift; utf8::upgrade($s); return $s }
sub aliases  { return sub { \@_ }->(@_) }    # array whose elements alias the args

my $NAN  = -sin(9**9**9);                    # +NaN on x86_64
my $NNAN = 9**9**9 / 9**9**9;               # -NaN (sign bit set) on x86_64
my $INF  = 9**9**9;

sub rand_bytes { my $n = shift; return join '', map { chr(int(rand(256))) } 1 .. $n }

sub rand_word {
    my ($min, $max) = @_;
    my $len = $min + int(rand($max - $min + 1));
    return join '', map { ('a' .. 'z', 'A' .. 'Z', '0' .. '9', ' ', '_', '-')[ rand 65 ] } 1 .. $len;
}

# ===========================================================================
# Events (web-request-like records). Shared by the decode and encode corpus.
# ===========================================================================
my @EV_METHODS = qw(GET GET GET GET POST POST PUT DELETE);
my @EV_PATHS   = ('/', '/api/v1/users', '/api/v1/users/42', '/api/v1/orders',
    '/search', '/static/js/app.min.js', '/login', '/health', '/api/v2/items/recommendations');
my @EV_STATUS  = (200, 200, 200, 200, 201, 204, 301, 304, 400, 403, 404, 500, 503);
my @EV_UA = (
    'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36',
    'Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1',
    'curl/8.4.0',
    'python-requests/2.31.0',
    'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0',
);
my @EV_DC   = qw(ams1 fra2 iad3 sjc1 sin1);
my @EV_VAR  = qw(control treatment_a treatment_b);
my @EV_LANG = ('en-US', 'de-DE', 'ja-JP', 'fr-FR');

# %o: with_bools (use core booleans), random_strings (incompressible-ish)
sub make_events {
    my ($n, %o) = @_;
    my @ev;
    for my $i (0 .. $n - 1) {
        my %e = (
            id         => $i + 1,
            ts         => 1700000000 + $i * 7 + int(rand(5)),
            method     => $EV_METHODS[ rand @EV_METHODS ],
            path       => $EV_PATHS[ rand @EV_PATHS ],
            status     => $EV_STATUS[ rand @EV_STATUS ],
            bytes      => int(rand(100000)),
            user_agent => $EV_UA[ rand @EV_UA ],
            ip         => join('.', 10, int(rand(4)), int(rand(256)), int(rand(256))),
            dc         => $EV_DC[ rand @EV_DC ],
            lang       => $EV_LANG[ rand @EV_LANG ],
            timings    => {
                total_ms => (int(rand(500000)) * 2 + 1) / 1000,
                db_ms    => (int(rand(100000)) * 2 + 1) / 1000,
                (rand() < 0.3 ? (cache_ms => (int(rand(1000)) * 2 + 1) / 100) : ()),
            },
            experiments => [
                map { { id => 'exp_' . int(rand(6)), variant => $EV_VAR[ rand @EV_VAR ] } }
                    1 .. int(rand(4))
            ],
            user_id => (rand() < 0.3 ? undef : 1000 + int(rand(5000))),
        );
        $e{referer}   = 'https://www.example.com/' . $EV_PATHS[ rand @EV_PATHS ] if rand() < 0.4;
        $e{cache_hit} = (rand() < 0.5 ? !!1 : !!0) if $o{with_bools};
        $e{trace}     = rand_word(200, 1500) if $o{random_strings};
        $e{note} = "Gr\x{fc}\x{df}e \x{2603} \x{1F600}" if rand() < 0.05;
        push @ev, \%e;
    }
    return \@ev;
}

# ===========================================================================
# DECODE CORPUS
# ===========================================================================

my @DATASETS;    # [name, description, builder, combo-filter (regex or undef)]
sub dataset { push @DATASETS, [@_] }

dataset(top_undef  => 'top-level undef',           sub { undef });
dataset(top_int    => 'top-level integer',         sub { 42 });
dataset(top_negint => 'top-level negative varint', sub { -100000 });
dataset(top_str    => 'top-level short string',    sub { "hello" });
dataset(top_utf8   => 'top-level utf8 string',     sub { "\x{263A} smile \x{1F600}" });
dataset(top_float  => 'top-level double',          sub { 0.1 });
dataset(top_ref    => 'top-level scalar ref',      sub { \"scalar ref" });
dataset(top_canon_undef => 'top-level ref to PL_sv_undef', sub { \undef });

dataset(undef_canonical => 'undef and canonical undef (PL_sv_undef) in arrays/hashes',
    sub {
        my $u;
        return [ undef, aliases(undef, 1, undef), \undef, { k => \undef, v => undef },
            [undef], $u, aliases(undef) ];
    });

dataset(booleans => 'core booleans, PL_sv_yes/no identities, refs to them',
    sub {
        my $t = !!1;
        my $f = !!0;
        return [ !!1, !!0, \!!1, \!!0, aliases(!!1, !!0), { t => !!1, f => !!0 },
            [ 1 == 1, 1 == 0 ], $t, $f, \$t, \$f, { nested => [ !!1, \!!0 ] } ];
    });

dataset(ints_small => 'small/medium integers, POS/NEG/VARINT/ZIGZAG boundaries',
    sub {
        return [ 0 .. 15, map({ -$_ } 1 .. 16), 16, -17, 127, 128, -128, -129, 255, 256,
            16383, 16384, 65535, 65536, -65536, 2147483647, -2147483648, 2147483648,
            4294967295, 4294967296, -4294967296, 1000000, -1000000 ];
    });

dataset(ints_big => 'large integers: 2**63, -2**63, 2**64-1, IV_MAX, 2**53',
    sub {
        return [ 9223372036854775807, -9223372036854775807, -9223372036854775808,
            9223372036854775808, 18446744073709551615, 18446744073709551614,
            9007199254740992, -9007199254740993, 1099511627776,
            { max => 18446744073709551615, min => -9223372036854775808 } ];
    });

dataset(floats_f32 => 'floats exactly representable as float32 (FLOAT tag)',
    sub {
        my $zero = 0.5 - 0.5;
        return [ 0.5, 1.5, -2.25, 2.0, 1024.0, 65504.0, $zero, -0.0,
            3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38,
            1.401298464324817e-45, 2**63, -2**63, 2**64, 2**100, 0.125, -1e-2 + 0.01 ];
    });

dataset(floats_f64 => 'doubles not representable as float32 (DOUBLE tag)',
    sub {
        return [ 0.1, -0.1, 1 / 3, 3.141592653589793, 2.718281828459045, 1e300, -1e-300,
            4.9406564584124654e-324, 1.7976931348623157e308, -1.7976931348623157e308,
            1e21, 123456.789, 16777217.0, 9007199254740993.0, 1e-7, 3.4028235677973366e38 ];
    });

dataset(floats_special => 'NaN (both signs), +Inf, -Inf, -0.0',
    sub { return [ $NAN, $NNAN, $INF, -$INF, -0.0, { nan => $NAN, inf => $INF }, [ -$INF ] ] });

dataset(strings_ascii => 'ASCII strings: empty, short, 31/32/33 bytes, 127/128, >16KB',
    sub {
        return [ "", "a", "abc", "hello world", "x" x 31, "y" x 32, "z" x 33, "w" x 127,
            "v" x 128, "u" x 16385, "tabs\tand\nnewlines\r\x00nul\x7f",
            join('', map { chr } 0 .. 127), "quote\" backslash\\ slash/" ];
    });

dataset(strings_binary => 'byte strings: high bytes, invalid UTF-8, valid-UTF-8 bytes w/o flag',
    sub {
        return [ "\xe9", "caf\xe9", "\xff\xfe\x00\x01", join('', map { chr } 0 .. 255),
            "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3\xa9t\xc3\xa9",
            "\xf0\x9f\x98\x80 bytes", "\x80" x 40, rand_bytes(20000), "\xe2\x82" ];
    });

dataset(strings_utf8 => 'UTF-8 flagged strings incl. latin1-range, 4-byte chars, long ones',
    sub {
        return [ upgraded("\xe9"), "\x{263A}", "\x{1F600}\x{1F4A9}",
            "Gr\x{fc}\x{df}e, \x{65e5}\x{672c}\x{8a9e}, \x{5e2}\x{5d1}\x{5e8}\x{5d9}\x{5ea}",
            "\x{1F600}" x 20, upgraded("\xc4" x 10000), upgraded("abc"), upgraded(""),
            upgraded("x" x 40), "\x{10FFFF}\x{E000}\x{D7FF}" ];
    });

dataset(numeric_strings => 'strings that look like numbers, and dual-typed scalars',
    sub {
        my $n = 42;
        my $ns = "$n";          # $n now IOK+POK
        my $s = "10";
        { no warnings; my $x = $s + 0; }    # $s now POK+IOK
        my $f = 1.5;
        my $fs = "$f";          # $f now NOK+POK
        my $g = "2.5";
        { no warnings; my $x = $g * 1; }
        my $junk = "abc";
        { no warnings; my $x = $junk + 0; }
        my $big = 18446744073709551615;
        my $bs = "$big";
        return [ "0", "1", "-1", "123", "1.5", "1e3", "00", " 42", "0x1F", "inf", "NaN",
            "-0", "18446744073709551616", "3.14159265358979323846", $n, $s, $f, $g, $junk,
            $big, dualvar(5, "five") ];
    });

dataset(arrays => 'arrays: empty, 1, 15, 16, 20 elements, nested',
    sub {
        return [ [], [ [] ], [1], [ 1 .. 15 ], [ 1 .. 16 ], [ map { [$_] } 1 .. 20 ],
            [ map { "s$_" } 1 .. 40 ], [ [ [ [ 'deep' ] ] ] ] ];
    });

dataset(hashes => 'hashes: empty, 15, 16, 40 keys, nested',
    sub {
        return [ {}, { a => {} }, { map { ("k$_" => $_) } 1 .. 15 },
            { map { ("k$_" => $_) } 1 .. 16 }, { map { ("key_$_" => "value $_") } 1 .. 40 },
            { x => { y => { z => [] } } } ];
    });

dataset(deep50 => 'nesting depth 50 (arrays and hashes alternating)',
    sub {
        my $d = "bottom";
        for my $i (1 .. 50) { $d = $i % 2 ? [$d] : { "level$i" => $d } }
        my $a = 'leaf';
        $a = [ $a, $_ ] for 1 .. 50;
        return [ $d, $a ];
    });

dataset(hash_keys => 'hash keys: empty, long, numeric, utf8, latin1 bytes, invalid UTF-8, 4-byte',
    sub {
        my %h = (
            ''                  => 'empty key',
            'a'                 => 1,
            ('long key ' x 10)  => 2,
            '123'               => 3,
            '-1'                => 4,
            "\x{263A}"          => 5,
            "\x{1F600}emoji"    => 6,
            "\xff\xfe"          => 7,
            "\xe9t\xe9"         => 8,
            "\xc3\xa9x"         => 9,
            ('k' x 300)         => 10,
        );
        $h{ upgraded("\xe8\xe0") } = 11;    # utf8 key in latin1 range (stored downgraded)
        return [ \%h, { "\x{65e5}\x{672c}" => { "\x{263A}" => 'nested utf8 keys' } } ];
    });

dataset(scalar_refs => 'refs to scalars, refs to refs, ref to hash/array refs',
    sub {
        my $x = "referenced";
        return [ \"str", \42, \1.5, \\"refref", \\\[ 1, 2 ], \{ a => 1 }, \[], \undef,
            \$x, \\\\\"five deep", \-7 ];
    });

dataset(shared_refs => 'same hashref/arrayref/scalarref referenced several times (REFP)',
    sub {
        my $h = { a => 1, b => [ 1, 2 ] };
        my $a = [ 3, 4 ];
        my $s = "shared scalar";
        my $big = { map { ("k$_" => $_) } 1 .. 20 };
        return [ $h, $h, $a, { x => $a, y => $h }, \$s, \$s, [$h], $big, $big, \$a, \$a ];
    });

dataset(aliases => 'the same scalar appearing twice in an array (ALIAS)',
    sub {
        my $x = "alias me";
        my $y = 12345;
        my $z = 1.25;
        return [ aliases($x, $x, $y, $y, $z), \$x, aliases($y) ];
    });

dataset(weak_refs => 'weakened second refs to hashes/arrays/scalars (no cycles)',
    sub {
        my $h = { w => 1 };
        my $a = [1];
        my $s = "weak";
        my $d = [ $h, $h, $a, $a, \$s, \$s ];
        weaken($d->[1]);
        weaken($d->[3]);
        weaken($d->[5]);
        my $h2 = { inner => 'x' };
        my $r = { strong => $h2, list => [ $h2, $h2 ] };
        weaken($r->{list}[0]);
        return [ $d, $r ];
    });

dataset(blessed => 'blessed hashes/arrays/scalar refs, repeated classes (OBJECTV)',
    sub {
        my $s1 = "sv";
        my $s2 = 5;
        return [ bless({ a => 1, b => 2 }, 'Foo'), bless({ a => 3 }, 'Foo'),
            bless([ 1, 2, 3 ], 'Foo::Bar'), bless([4], 'Foo::Bar'), bless(\$s1, 'Baz'),
            bless(\$s2, 'Baz'), bless({}, 'Foo'), bless([], 'Empty'),
            { obj => bless({ x => 1 }, 'Foo') }, bless(\\"x", 'RefRef'),
            bless({ n => 1 }, "K\x{263A}::Cl\x{e4}ss"), bless({ n => 2 }, "K\x{263A}::Cl\x{e4}ss") ];
    });

dataset(regexps => 'qr// with and without flags, utf8 patterns, blessed regexp',
    sub {
        return [ qr/abc/, qr/a.b/ims, qr/^\d+$/x, qr/\w+/a, qr/caf\x{e9}/,
            qr/\x{263A}+/, qr/(?<name>a)|b/, bless(qr/blessed/i, 'MyRegexp'), qr/abc/,
            qr//, qr/x/p, "\x{263A}" =~ /./ ? qr/\x{263A}/ : qr/never/ ];
    });

dataset(freeze => 'objects with FREEZE/THAW (OBJECT_FREEZE with freeze_callbacks)',
    sub {
        return [ SerealTest::Frozen->new(name => 'a', n => 1, list => [ 1, 2 ]),
            SerealTest::Frozen->new(name => 'b', n => 2, list => []),
            { inner => SerealTest::Frozen->new(name => "\x{263A}", n => -3, list => [ { x => 1 } ]) },
            bless({ plain => 1 }, 'Foo') ];
    });

dataset(dedupe_strings => 'many repeated string values and keys (COPY / ALIAS dedupe)',
    sub {
        my @w = ('alpha', 'beta', 'gamma', 'x', 'yz', 'abc', 'abcd',
            "\x{263A}\x{263A}\x{263A}\x{263A}", "caf\xe9 bytes", 'a longer repeated string value');
        return [ map { { name => $w[ $_ % @w ], tag => $w[ ($_ * 3) % @w ], id => $_,
                    "key_" . ($_ % 3) => $w[ ($_ * 7) % @w ] } } 0 .. 40 ];
    });

dataset(mixed_record => 'realistic nested record with most features',
    sub {
        my $addr = { street => "Hauptstra\x{df}e 1", city => "M\x{fc}nchen", zip => '80331' };
        return {
            id => 12345, name => "J\x{f6}rg \x{1F600}", active => !!1, score => 98.6,
            ratio => 0.25, tags => [qw(admin user tester)], address => $addr, billing => $addr,
            history => [ map { { ts => 1700000000 + $_, action => $_ % 2 ? 'login' : 'logout' } } 1 .. 18 ],
            meta => undef, avatar => "\x89PNG\r\n\x1a\n" . rand_bytes(64), pattern => qr/^j\w+$/i,
            obj => bless({ v => 1 }, 'Foo'),
        };
    });

dataset(large_text_100k => '~100KB compressible text', sub {
        my $text = join ' ', map { ('lorem', 'ipsum', 'dolor', 'sit', 'amet', 'consectetur')[ rand 6 ] } 1 .. 17000;
        return [ $text, substr($text, 0, 1000) ];
    }, qr/^(v1|v1_snappyold|v2_snappy|v3|v3_zlib_l1|v4_zstd|v5|v5_zlib_l9|v5_zstd_l19|v5_zstd_default|v5_snappy_default|v5_dedupe)$/);

dataset(large_binary_100k => '~100KB random bytes (incompressible)', sub { return rand_bytes(100000) },
    qr/^(v1_snappyold|v3_zlib_l1|v4_zstd|v5|v5_snappy_default|v5_zstd_default)$/);

dataset(large_array_100k => '~100KB array of small hashes', sub {
        return [ map { { i => $_, s => "item $_", f => $_ + 0.5, l => [ $_ % 7, -($_ % 13) ] } } 1 .. 3000 ];
    }, qr/^(v2|v3_zlib_default|v3_dedupe|v4_snappy|v4_canonrefs|v5|v5_zstd_default|v5_all)$/);

my @DCOMBOS = (
    [ v1                => { protocol_version => 1 } ],
    [ v1_snappyold      => { protocol_version => 1, snappy => 1, snappy_threshold => 0 } ],
    [ v1_snappyincr     => { protocol_version => 1, compress => SRL_SNAPPY, compress_threshold => 0 } ],
    [ v1_dedupe         => { protocol_version => 1, dedupe_strings => 1 } ],
    [ v2                => { protocol_version => 2 } ],
    [ v2_snappy         => { protocol_version => 2, compress => SRL_SNAPPY, compress_threshold => 0 } ],
    [ v2_dedupe         => { protocol_version => 2, dedupe_strings => 1 } ],
    [ v2_freeze         => { protocol_version => 2, freeze_callbacks => 1 } ],
    [ v3                => { protocol_version => 3 } ],
    [ v3_zlib_l1        => { protocol_version => 3, compress => SRL_ZLIB, compress_threshold => 0, compress_level => 1 } ],
    [ v3_zlib_default   => { protocol_version => 3, compress => SRL_ZLIB } ],
    [ v3_dedupe         => { protocol_version => 3, dedupe_strings => 1 } ],
    [ v3_aliased        => { protocol_version => 3, aliased_dedupe_strings => 1 } ],
    [ v3_canonical      => { protocol_version => 3, canonical => 1 } ],
    [ v4                => { protocol_version => 4 } ],
    [ v4_snappy         => { protocol_version => 4, compress => SRL_SNAPPY, compress_threshold => 0 } ],
    [ v4_zstd           => { protocol_version => 4, compress => SRL_ZSTD, compress_threshold => 0 } ],
    [ v4_sortkeys2      => { protocol_version => 4, sort_keys => 2 } ],
    [ v4_canonrefs      => { protocol_version => 4, canonical_refs => 1 } ],
    [ v4_noshared       => { protocol_version => 4, no_shared_hashkeys => 1 } ],
    [ v4_freeze         => { protocol_version => 4, freeze_callbacks => 1 } ],
    [ v5                => { protocol_version => 5 } ],
    [ v5_snappy_default => { protocol_version => 5, compress => SRL_SNAPPY } ],
    [ v5_zlib_l9        => { protocol_version => 5, compress => SRL_ZLIB, compress_threshold => 0, compress_level => 9 } ],
    [ v5_zstd_l19       => { protocol_version => 5, compress => SRL_ZSTD, compress_threshold => 0, compress_level => 19 } ],
    [ v5_zstd_default   => { protocol_version => 5, compress => SRL_ZSTD } ],
    [ v5_dedupe         => { protocol_version => 5, dedupe_strings => 1 } ],
    [ v5_aliased        => { protocol_version => 5, aliased_dedupe_strings => 1 } ],
    [ v5_canonical      => { protocol_version => 5, canonical => 1 } ],
    [ v5_sortkeys1      => { protocol_version => 5, sort_keys => 1 } ],
    [ v5_sortkeys3      => { protocol_version => 5, sort_keys => 3 } ],
    [ v5_noshared       => { protocol_version => 5, no_shared_hashkeys => 1 } ],
    [ v5_freeze         => { protocol_version => 5, freeze_callbacks => 1 } ],
    [ v5_all            => { protocol_version => 5, dedupe_strings => 1, canonical => 1, freeze_callbacks => 1,
                             compress => SRL_ZLIB, compress_threshold => 0 } ],
);
# zstd framing is accepted by the Perl encoder at protocol 3 although the
# spec says it is new in v4; only a couple of such documents, named v3zstd.
my @V3ZSTD = ([ v3zstd => { protocol_version => 3, compress => SRL_ZSTD, compress_threshold => 0 } ]);

sub opts_desc {
    my ($o) = @_;
    return join ',', map { "$_=$o->{$_}" } sort keys %$o;
}

sub decode_case {
    my ($name, $desc, $srl, $with_header) = @_;
    my ($body_json, $header_json);
    if ($with_header) {
        my $r = DEC->decode_with_header($srl);
        $header_json = Render::render_json($r->[0]);
        $body_json   = Render::render_json($r->[1]);
    }
    else {
        my $out = DEC->decode($srl);
        $body_json = Render::render_json($out);
    }
    write_file("$OUT/decode/$name.srl",         $srl);
    write_file("$OUT/decode/$name.expect.json", $body_json);
    write_file("$OUT/decode/$name.header.json", $header_json) if $with_header;
    push @MANIFEST, "decode $name $desc";
    $STATS{decode}++;
}

sub build_dataset {
    my ($ds) = @_;
    srand(seed_for($ds->[0]));
    return $ds->[2]->();
}

for my $ds (@DATASETS) {
    my ($dname, $ddesc, undef, $filter) = @$ds;
    my %seen;
    my @combos = (@DCOMBOS, ($dname =~ /^(mixed_record|dedupe_strings|large_text_100k)$/ ? @V3ZSTD : ()));
    for my $c (@combos) {
        my ($cname, $opts) = @$c;
        next if $filter && $cname !~ $filter;
        my $data = build_dataset($ds);
        my $srl = eval { Sereal::Encoder->new({%$opts})->encode($data) };
        if (!defined $srl) {
            (my $err = $@) =~ s/ at .*//s;
            push @SKIPPED, "decode ${dname}__$cname: $err";
            $STATS{skipped}++;
            next;
        }
        if ($seen{$srl}++) { $STATS{dup}++; next }
        decode_case("${dname}__$cname", "$ddesc [" . opts_desc($opts) . "]", $srl, 0);
    }
}

# ---- events documents ----
{
    my @ev_cases = (
        [ 'events_orig_v3_zlib_dedupe', 1000, { protocol_version => 3, compress => SRL_ZLIB, dedupe_strings => 1 },
            'the "original" events form: v3 zlib dedupe' ],
        [ 'events_v5_zstd',             2000, { protocol_version => 5, compress => SRL_ZSTD }, 'v5 zstd' ],
        [ 'events_v5_none',             500,  { protocol_version => 5 }, 'v5 uncompressed' ],
        [ 'events_v3_none',             200,  { protocol_version => 3 }, 'v3 uncompressed' ],
        [ 'events_v4_snappy_canonical', 800,  { protocol_version => 4, compress => SRL_SNAPPY, canonical => 1 }, 'v4 snappy canonical' ],
        [ 'events_v5_zlib_dedupe_bools', 300, { protocol_version => 5, compress => SRL_ZLIB, dedupe_strings => 1 }, 'v5 zlib dedupe, with booleans', 1 ],
        [ 'events_v2_snappy',           400,  { protocol_version => 2, compress => SRL_SNAPPY }, 'v2 snappy' ],
    );
    for my $c (@ev_cases) {
        my ($name, $n, $opts, $desc, $bools) = @$c;
        srand(seed_for($name));
        my $data = make_events($n, with_bools => $bools);
        my $srl  = Sereal::Encoder->new({%$opts})->encode($data);
        decode_case($name, "$n web-request events, $desc [" . opts_desc($opts) . "]", $srl, 0);
    }
}

# ---- user header documents ----
{
    my @headers = (
        [ hmap   => sub { { routing => 'queue.main', ts => 1700000000, tags => [ 'a', 'b' ] } } ],
        [ hstr   => sub { "a plain string header \x{263A}" } ],
        [ hint   => sub { 42 } ],
        [ harray => sub { [ 1, 2.5, undef, 'x' ] } ],
    );
    my @bodies = (
        [ bsmall => sub { { payload => [ 1, 2, 3 ], msg => 'hello' } } ],
        [ blarge => sub { srand(7); make_events(50) } ],
    );
    my @hopts = (
        [ v2        => { protocol_version => 2 } ],
        [ v3_zlib   => { protocol_version => 3, compress => SRL_ZLIB, compress_threshold => 0 } ],
        [ v4_snappy => { protocol_version => 4, compress => SRL_SNAPPY, compress_threshold => 0 } ],
        [ v5        => { protocol_version => 5 } ],
        [ v5_zstd   => { protocol_version => 5, compress => SRL_ZSTD, compress_threshold => 0, dedupe_strings => 1 } ],
    );    # (protocol 1 cannot carry a user header: the encoder croaks)
    my $i = 0;
    for my $h (@headers) {
        for my $b (@bodies) {
            for my $o (@hopts) {
                $i++;
                my $name = "header_$h->[0]_$b->[0]__$o->[0]";
                my $srl = eval {
                    # alternate between the functional and the OO interface
                    $i % 2
                        ? encode_sereal_with_header_data($b->[1]->(), $h->[1]->(), { %{ $o->[1] } })
                        : Sereal::Encoder->new({ %{ $o->[1] } })->encode($b->[1]->(), $h->[1]->());
                };
                if (!defined $srl) {
                    (my $err = $@) =~ s/ at .*//s;
                    push @SKIPPED, "decode $name: $err";
                    $STATS{skipped}++;
                    next;
                }
                my $has = eval { my $r = DEC->decode_only_header($srl); defined $r };
                if (!$has) {
                    push @SKIPPED, "decode $name: encoder emitted no user header";
                    $STATS{skipped}++;
                    next;
                }
                decode_case($name, "document with user header $h->[0], body $b->[0] [" . opts_desc($o->[1]) . "]",
                    $srl, 1);
            }
        }
    }
}

# ===========================================================================
# ENCODE CORPUS (byte identity)
# ===========================================================================
my $JSON_T1 = JSON::XS->new->utf8->canonical->allow_nonref;

my @KEY_POOL = (qw(id name type value data items count status user email created updated
        tags meta a b c x y z), '', 'key with spaces', "na\x{ef}ve", "\x{43a}\x{43b}\x{44e}\x{447}",
    "\x{65e5}\x{672c}", "\x{1F600}emoji", "caf\x{e9}", 'k' x 40);
my @STR_POOL = ('hello', 'world', 'x', 'ab', 'abc', 'abcd', 'repeated value', '', 'GET',
    "\x{263A}\x{263A}", "Gr\x{fc}\x{df}e", "\x{1F600}\x{1F680}", 'https://example.com/a/b?c=d',
    'some medium length string that repeats');
my @NICE_FLOATS = (1.5, 0.25, -0.5, 0.75, -2.5, 1024.5, 0.125, 3.75, -100.25, 0.1, 0.2, 0.3,
    1e300, -1e300, 1e-300, 3.14159, 2.71828, 123.456, -0.001, 1e100, 6.02e23, 1.5e-10,
    65504.5, 0.333333333333333);

sub rand_json_string {
    my $r = rand();
    return $STR_POOL[ rand @STR_POOL ] if $r < 0.35;
    if ($r < 0.37) {    # long string > 1 KB
        my $base = rand() < 0.5 ? 'long ascii text ' : "long \x{fc}nic\x{f6}de \x{1F600} text ";
        return $base x (70 + int(rand(40)));
    }
    my $len = int(rand(41));
    my $kind = rand();
    if ($kind < 0.6) {
        return join '', map { chr(32 + int(rand(95))) } 1 .. $len;
    }
    elsif ($kind < 0.85) {
        return join '', map { my $p = rand(); chr($p < 0.5 ? 97 + int(rand(26)) : $p < 0.8 ? 0xC0 + int(rand(0x100)) : 0x4E00 + int(rand(500))) } 1 .. $len;
    }
    else {
        return join '', map { my $p = rand(); chr($p < 0.5 ? 97 + int(rand(26)) : 0x1F600 + int(rand(80))) } 1 .. $len;
    }
}

sub rand_json_int {
    my $r = rand();
    return int(rand(16))                 if $r < 0.25;
    return -1 - int(rand(16))            if $r < 0.40;
    return int(rand(2000)) - 1000        if $r < 0.60;
    return int(rand(2**31)) * (rand() < 0.5 ? -1 : 1) if $r < 0.75;
    my @big = (9223372036854775807, -9223372036854775807, 9223372036854775808, 18446744073709551615,
        18446744073709551614, 4294967296, -4294967297, 1099511627776, 9007199254740993, -9007199254740993,
        12345678901234567, 16, -17, 127, 128, 16384, 2147483648, -2147483649);
    return $big[ rand @big ];
}

sub rand_json_float {
    return $NICE_FLOATS[ rand @NICE_FLOATS ] if rand() < 0.5;
    for (1 .. 100) {
        my $m   = 1 + int(rand(999999));
        my $k   = 1 + int(rand(6));
        my $f   = ($m / (10**$k)) * (rand() < 0.5 ? -1 : 1);
        $f *= 10**(int(rand(40)) - 20) if rand() < 0.2;
        my $p = sprintf('%.15g', $f);
        next unless $p =~ /[.eE]/;    # integral doubles would print as integers
        next unless $p + 0 == $f;
        return $p + 0;
    }
    return 1.5;
}

sub rand_json_value {
    my ($depth, $o) = @_;
    my $r = rand();
    if ($depth < $o->{max_depth} && $r < 0.35) {
        return rand() < 0.5 ? rand_json_object($depth + 1, $o) : rand_json_array($depth + 1, $o);
    }
    $r = rand();
    return rand_json_string()                        if $r < 0.40;
    return rand_json_int()                           if $r < 0.70;
    return rand_json_float()                         if $r < 0.87;
    return (rand() < 0.5 ? JSON::XS::true() : JSON::XS::false()) if $r < 0.94 && $o->{bools};
    return undef;
}

sub rand_count {
    my $r = rand();
    return int(rand(4))        if $r < 0.4;
    return 4 + int(rand(12))   if $r < 0.75;
    return 16 + int(rand(5));    # >= 16 elements
}

sub rand_json_object {
    my ($depth, $o) = @_;
    my $n = rand_count();
    my %h;
    for (1 .. $n) {
        my $k = rand() < 0.7 ? $KEY_POOL[ rand @KEY_POOL ] : rand_json_string();
        $k = substr($k, 0, 60) if length($k) > 60;
        $h{$k} = rand_json_value($depth, $o);
    }
    return \%h;
}

sub rand_json_array {
    my ($depth, $o) = @_;
    my $n = rand_count();
    return [ map { rand_json_value($depth, $o) } 1 .. $n ];
}

# records with identical key sets (repeated keys / values across objects)
sub rand_json_records {
    my ($o) = @_;
    my @keys = map { $KEY_POOL[ rand @KEY_POOL ] } 1 .. (2 + int(rand(18)));
    my $n = 2 + int(rand(40));
    return [ map { my %h; $h{$_} = (rand() < 0.6 ? $STR_POOL[ rand @STR_POOL ] : rand_json_value(2, $o)) for @keys; \%h } 1 .. $n ];
}

# ---- helpers for booleans and round-trip checks ----
sub walk_replace {    # in place, preserving hash key order
    my ($d, $cb) = @_;
    if (ref $d eq 'ARRAY') {
        for my $i (0 .. $#$d) {
            my $nv = $cb->($d->[$i]);
            if (defined $nv) { $d->[$i] = $$nv } else { walk_replace($d->[$i], $cb) }
        }
    }
    elsif (ref $d eq 'HASH') {
        for my $k (keys %$d) {
            my $nv = $cb->($d->{$k});
            if (defined $nv) { $d->{$k} = $$nv } else { walk_replace($d->{$k}, $cb) }
        }
    }
}

sub json_bools_to_core {
    my ($d) = @_;
    walk_replace($d, sub {
        my $v = shift;
        return undef unless blessed($v) && $v->isa('JSON::PP::Boolean');
        return $v ? \!!1 : \!!0;
    });
}

sub core_bools_to_json {
    my ($d) = @_;
    walk_replace($d, sub {
        my $v = shift;
        return undef if ref $v || !defined $v || !builtin::is_bool($v);
        return $v ? \JSON::XS::true() : \JSON::XS::false();
    });
}

sub has_json_bool {
    my ($d) = @_;
    return 1 if blessed($d) && $d->isa('JSON::PP::Boolean');
    return scalar grep { has_json_bool($_) } @$d if ref $d eq 'ARRAY';
    return scalar grep { has_json_bool($_) } values %$d if ref $d eq 'HASH';
    return 0;
}

sub kind_of {
    my ($v) = @_;
    return 'null' unless defined $v;
    return 'bool' if blessed($v) && $v->isa('JSON::PP::Boolean');
    return 'bool' if !ref $v && builtin::is_bool($v);
    return ref $v if ref $v;
    my $f = B::svref_2object(\$v)->FLAGS;
    return 'str'   if $f & B::SVf_POK;
    return 'int'   if $f & B::SVf_IOK;
    return 'float' if $f & B::SVf_NOK;
    return 'str';
}

# strict comparison of D and decode(T2): same kinds, same values
sub same_data {
    my ($a, $b, $path) = @_;
    my ($ka, $kb) = (kind_of($a), kind_of($b));
    return "$path: kind $ka vs $kb" if $ka ne $kb;
    if ($ka eq 'ARRAY') {
        return "$path: length" if @$a != @$b;
        for my $i (0 .. $#$a) { my $e = same_data($a->[$i], $b->[$i], "$path\[$i]"); return $e if $e }
        return '';
    }
    if ($ka eq 'HASH') {
        return "$path: key count" if keys %$a != keys %$b;
        for my $k (keys %$a) {
            return "$path: missing key $k" unless exists $b->{$k};
            my $e = same_data($a->{$k}, $b->{$k}, "$path\{$k}");
            return $e if $e;
        }
        return '';
    }
    return '' if $ka eq 'null';
    return (!!$a eq !!$b ? '' : "$path: bool") if $ka eq 'bool';
    return ("$a" eq "$b" ? '' : "$path: int $a vs $b") if $ka eq 'int';
    return ($a == $b ? '' : "$path: float $a vs $b") if $ka eq 'float';
    return ($a eq $b && utf8::is_utf8($a) == utf8::is_utf8($b) ? '' : "$path: string") if $ka eq 'str';
    return "$path: unexpected kind $ka";
}

my @ECOMBOS;
for my $pv (3, 4, 5) {
    for my $c (qw(none snappy zlib zstd)) {
        next if $c eq 'zstd' && $pv < 4;
        for my $dd (0, 1) {
            for my $can (0, 1) {
                push @ECOMBOS, { protocol => $pv, compress => $c, dedupe => $dd, canonical => $can };
            }
        }
    }
}
my %COMPRESS_CONST = (none => SRL_UNCOMPRESSED, snappy => SRL_SNAPPY, zlib => SRL_ZLIB, zstd => SRL_ZSTD);

sub encoder_for {
    my ($c) = @_;
    my %o = (protocol_version => $c->{protocol});
    if ($c->{compress} ne 'none') {
        $o{compress}           = $COMPRESS_CONST{ $c->{compress} };
        $o{compress_level}     = $c->{level} if $c->{compress} =~ /^(zlib|zstd)$/ && $c->{level_explicit};
        $o{compress_threshold} = $c->{threshold} if $c->{threshold} != 1024;
    }
    $o{dedupe_strings} = 1 if $c->{dedupe};
    $o{canonical}      = 1 if $c->{canonical};
    return Sereal::Encoder->new(\%o);
}

sub opts_line {
    my ($c) = @_;
    return sprintf("protocol=%d compress=%s level=%d threshold=%d dedupe=%d canonical=%d\n",
        $c->{protocol}, $c->{compress}, $c->{level}, $c->{threshold}, $c->{dedupe}, $c->{canonical});
}

# ---------------------------------------------------------------------------
# Key order. Sereal::Encoder walks a hash's bucket array directly, which is
# NOT the order of keys()/each()/JSON::XS (hv_iternext permutes the bucket
# index with a per-hash value even with PERL_PERTURB_KEYS=0). So the order
# Sereal used is recovered from Sereal itself: D is encoded once more
# (protocol 5, no compression/dedupe/canonical, no shared hash keys), the
# body is walked, and the JSON text is assembled in that order (leaves are
# still printed by JSON::XS).
sub sereal_order {
    my ($data) = @_;
    my $srl  = Sereal::Encoder->new({ protocol_version => 5, no_shared_hashkeys => 1 })->encode($data);
    my $body = substr($srl, 6);    # "=\xF3rl" 0x05 0x00
    my $pos  = 0;
    my $varint = sub {
        my ($v, $sh) = (0, 0);
        while (1) {
            my $b = ord substr($body, $pos++, 1);
            $v |= ($b & 0x7f) << $sh;
            $sh += 7;
            last unless $b & 0x80;
        }
        return $v;
    };
    my ($item, $str);
    $str = sub {    # returns a perl string (decoded if STR_UTF8)
        my $t = ord(substr($body, $pos++, 1)) & 0x7f;
        my $len;
        if    ($t >= 0x60)               { $len = $t & 0x1f }
        elsif ($t == 0x26 || $t == 0x27) { $len = $varint->() }
        else                             { die "sereal_order: unexpected key tag $t\n" }
        my $s = substr($body, $pos, $len);
        $pos += $len;
        utf8::decode($s) if $t == 0x27;
        return $s;
    };
    $item = sub {
        my $t = ord(substr($body, $pos++, 1)) & 0x7f;
        if ($t < 0x20 || $t == 0x25 || $t == 0x39 || ($t >= 0x34 && $t <= 0x35) || $t == 0x3a || $t == 0x3b) {
            return undef;
        }
        if ($t == 0x20 || $t == 0x21) { $varint->(); return undef }
        if ($t == 0x22) { $pos += 4; return undef }
        if ($t == 0x23) { $pos += 8; return undef }
        if ($t == 0x26 || $t == 0x27) { $pos += $varint->(); return undef }
        if ($t >= 0x60) { $pos += $t & 0x1f; return undef }
        if ($t == 0x28) { return $item->() }
        if ($t == 0x2b) { my $n = $varint->(); return [ map { $item->() } 1 .. $n ] }
        if ($t >= 0x40 && $t < 0x50) { return [ map { $item->() } 1 .. ($t & 15) ] }
        if ($t == 0x2a) { my $n = $varint->(); return { o => [ map { my $k = $str->(); [ $k, $item->() ] } 1 .. $n ] } }
        if ($t >= 0x50 && $t < 0x60) { return { o => [ map { my $k = $str->(); [ $k, $item->() ] } 1 .. ($t & 15) ] } }
        die sprintf("sereal_order: unexpected tag 0x%02x\n", $t);
    };
    my $tree = $item->();
    die "sereal_order: trailing bytes\n" if $pos != length $body;
    return $tree;
}

my $JSON_LEAF = JSON::XS->new->utf8->allow_nonref;
sub json_in_order {
    my ($d, $order) = @_;
    if (ref $d eq 'HASH') {
        die "json_in_order: shape mismatch\n" unless ref $order eq 'HASH';
        my @o = @{ $order->{o} };
        die "json_in_order: key count mismatch\n" if @o != keys %$d;
        return '{' . join(',', map {
                my ($k, $sub) = @$_;
                die "json_in_order: key not found\n" unless exists $d->{$k};
                $JSON_LEAF->encode("$k") . ':' . json_in_order($d->{$k}, $sub)
            } @o) . '}';
    }
    if (ref $d eq 'ARRAY') {
        die "json_in_order: shape mismatch\n" unless ref $order eq 'ARRAY' && @$order == @$d;
        return '[' . join(',', map { json_in_order($d->[$_], $order->[$_]) } 0 .. $#$d) . ']';
    }
    return $JSON_LEAF->encode($d);
}

sub encode_case {
    my ($name, $desc, $gen, $c, %o) = @_;
    my $t1 = $o{t1} // $JSON_T1->encode($gen);
    # JSON::XS's float parser is not correctly rounded ("0.3" comes out one
    # ulp off), so numbers are converted by perl instead (Render.pm); the
    # data is otherwise exactly what JSON::XS decoding gives (fresh, refcnt 1)
    my $D = Render::decode_json_exact($t1);
    my $bools = has_json_bool($D);
    die "encode $name: booleans only allowed at protocol 5\n" if $bools && $c->{protocol} < 5;
    json_bools_to_core($D) if $bools;
    my $S = encoder_for($c)->encode($D);    # before any further JSON encoding of D
    my $order = sereal_order($D);
    core_bools_to_json($D) if $bools;
    my $t2 = json_in_order($D, $order);
    my $D2 = Render::decode_json_exact($t2);
    my $err = same_data($D, $D2, '$');
    die "encode $name: T2 does not round-trip: $err\n" if $err;
    # sanity: the reference decodes S back to the same rendering as T2
    my $back = DEC->decode($S);
    json_bools_to_core($D2) if $bools;
    my $e2 = Render::to_json(Render::render($back));
    my $e1 = Render::to_json(Render::render($D2));
    die "encode $name: reference decode differs from data\n" if $e1 ne $e2;

    write_file("$OUT/encode/$name.json", $t2);
    write_file("$OUT/encode/$name.srl",  $S);
    write_file("$OUT/encode/$name.opts", opts_line($c));
    push @MANIFEST, "encode $name $desc";
    $STATS{encode}++;
}

sub combo_name {
    my ($c) = @_;
    my $s = "v$c->{protocol}_$c->{compress}";
    $s .= "_l$c->{level}" if $c->{compress} ne 'none';
    $s .= "_t$c->{threshold}" if $c->{compress} ne 'none';
    $s .= "_d$c->{dedupe}c$c->{canonical}";
    return $s;
}

# ---- the fixed example ----
{
    my $c = { protocol => 3, compress => 'none', level => 0, threshold => 1024, dedupe => 0, canonical => 0 };
    my $D = Render::decode_json_exact('[{"cpu":5},{"cpu":99}]');
    my $S = encoder_for($c)->encode($D);
    my $hex = unpack 'H*', $S;
    die "cpu_example: reference produced $hex\n" unless $hex eq '3df3726c030042516363707505512f032063';
    encode_case('cpu_example', 'fixed example [{cpu:5},{cpu:99}] v3 no options', undef, $c,
        t1 => '[{"cpu":5},{"cpu":99}]');
}

# ---- special hand-made cases ----
{
    my @special = (
        [ ints_edges => [ 0 .. 15, map({ -$_ } 1 .. 16), 16, -17, 9223372036854775807,
                -9223372036854775807, 9223372036854775808, 18446744073709551615 ] ],
        [ int_min => [ -9223372036854775808, 1, -9223372036854775807 ] ],
        [ floats_nice => [ @NICE_FLOATS ] ],
        [ empty_array => [] ],
        [ empty_object => {} ],
        [ top_string => "just a string" ],
        [ top_int => 7 ],
        [ top_null => undef ],
        [ top_float => 0.1 ],
        [ keys16 => { map { ("key$_" => $_) } 1 .. 16 } ],
        [ keys15 => { map { ("key$_" => $_) } 1 .. 15 } ],
        [ arr16 => [ 1 .. 16 ] ],
        [ arr15 => [ 1 .. 15 ] ],
        [ utf8_keys => { "\x{263A}" => 1, "caf\x{e9}" => 2, "\x{1F600}" => 3, "a" => 4, "" => 5 } ],
        [ repeated_strings => [ map { ("abcd", "xyz", "\x{263A}\x{263A}", "a long repeated value string") } 1 .. 10 ] ],
    );
    my $i = 0;
    for my $s (@special) {
        for my $c ({ protocol => 3, compress => 'none', level => 0, threshold => 1024, dedupe => 0, canonical => 0 },
            { protocol => 5, compress => 'none', level => 0, threshold => 1024, dedupe => 1, canonical => 1 },
            { protocol => 4, compress => 'zlib', level => 6, threshold => 0, dedupe => 1, canonical => 0 })
        {
            encode_case("special_$s->[0]__" . combo_name($c), "hand-made $s->[0]", $s->[1], $c);
        }
    }
}

# ---- random documents, events, over all option combos ----
{
    srand(20240601);
    my $n = 0;
    for my $round (1 .. 10) {
        for my $base (@ECOMBOS) {
            my $c = {%$base};
            $c->{level} = $c->{compress} eq 'zlib' ? 6 : $c->{compress} eq 'zstd' ? 3 : 0;
            $c->{threshold} = 1024;
            if ($c->{compress} ne 'none') {
                my $r = rand();
                $c->{threshold} = $r < 0.35 ? 0 : $r < 0.85 ? 1024 : 1000000;
                if ($c->{compress} eq 'zlib' && rand() < 0.5) {
                    $c->{level} = (1, 9, 6)[ rand 3 ];
                    $c->{level_explicit} = 1;
                }
                if ($c->{compress} eq 'zstd' && rand() < 0.5) {
                    $c->{level} = (1, 19, 22, 3)[ rand 4 ];
                    $c->{level_explicit} = 1;
                }
            }
            my $bools = $c->{protocol} == 5 && rand() < 0.5;
            my $o = { max_depth => 1 + int(rand(4)), bools => $bools };
            my ($kind, $gen);
            my $r = rand();
            if ($round == 3 || $round == 7) {
                my $evn = (20, 50, 100, 200, 500, 1000)[ rand 6 ];
                $evn = 3000 if $round == 7 && $n % 23 == 0;
                # incompressible-ish: random long strings in every record
                my $rs = $round == 7 && $n % 4 == 0;
                $evn = (20, 30, 60)[ rand 3 ] if $rs;
                $kind = $rs ? "events${evn}_random" : "events$evn";
                $gen = make_events($evn, random_strings => $rs);
                # JSON-able: no core booleans here; add JSON booleans for v5
                if ($bools) { $_->{cached} = rand() < 0.5 ? JSON::XS::true() : JSON::XS::false() for @$gen }
            }
            elsif ($r < 0.3) { $kind = 'records'; $gen = rand_json_records($o) }
            elsif ($r < 0.6) { $kind = 'object';  $gen = rand_json_object(0, $o) }
            elsif ($r < 0.9) { $kind = 'array';   $gen = rand_json_array(0, $o) }
            else             { $kind = 'scalar';  $gen = rand_json_value(99, $o) }
            $n++;
            my $name = sprintf('e%03d_%s__%s', $n, $kind, combo_name($c));
            encode_case($name, "random $kind" . ($bools ? ' (booleans allowed)' : ''), $gen, $c);
        }
    }
}

write_file("$OUT/MANIFEST", join('', map { "$_\n" } @MANIFEST));

my $dt = Time::HiRes::time() - $T0;
printf STDERR "gen_corpus: %d decode cases, %d encode cases, %d duplicate outputs skipped, %d skipped, %.1fs\n",
    $STATS{decode}, $STATS{encode}, $STATS{dup}, $STATS{skipped}, $dt;
print STDERR "  skipped: $_\n" for @SKIPPED;
