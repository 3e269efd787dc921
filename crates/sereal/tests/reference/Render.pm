package Render;
# Shared renderer: maps a Perl data structure (as produced by Sereal::Decoder)
# onto the JSON mapping used by the Rust Sereal codec tests.
#
#   undef                      -> null
#   5.36 core boolean          -> true / false
#   POK scalar                 -> string (UTF8 flag on: its characters;
#                                 off: decoded text if the bytes are strict
#                                 UTF-8, else {"$binary": base64(bytes)})
#   IOK (no POK)               -> integer (IV or UV, exact)
#   NOK (no POK, no IOK)       -> number printed with %.17g; NaN -> "NaN",
#                                 +Inf -> "Infinity", -Inf -> "-Infinity"
#   hash keys                  -> like strings, invalid UTF-8 binary key ->
#                                 "$binary:" . base64(bytes)
#   refs                       -> transparent (array/hash/scalar rendering)
#   blessed                    -> {"$object": class, "$value": unblessed rendering}
#   qr//                       -> {"$regexp": pattern, "$flags": modifiers}
#                                 (wrapped in $object if class ne "Regexp")
#
# Floats are carried through the Perl structure as marker strings
# ("\x01NUM:<%.17g>") so that they can be printed with full precision;
# to_json() turns them into bare JSON numbers.
use strict;
use warnings;
no warnings 'experimental::builtin';
no warnings 'recursion';
use B ();
use MIME::Base64 ();
use JSON::XS ();
use Scalar::Util ();
use re ();

our $NUM_MARK = "\x01NUM:";
my $INF = 9**9**9;

# ---------------------------------------------------------------------------
# FREEZE/THAW test class (used by gen_corpus.pl). FREEZE returns a list of
# values; THAW re-blesses them as an array so they render as
# {"$object": class, "$value": [values...]}.
package SerealTest::Frozen;
sub new { my ($class, %args) = @_; return bless {%args}, $class }
sub FREEZE {
    my ($self, $serializer) = @_;
    return ($self->{name}, $self->{n}, $self->{list});
}
sub THAW {
    my ($class, $serializer, @values) = @_;
    return bless [@values], $class;
}

# Fallback for any other class that arrives as OBJECT_FREEZE (e.g. in
# documents produced by the Rust encoder): same convention as above.
package UNIVERSAL;
no warnings 'redefine';
sub THAW {
    my ($class, $serializer, @values) = @_;
    return bless [@values], $class;
}

package Render;

sub is_strict_utf8_bytes {
    my ($bytes) = @_;
    my $c = $bytes;
    utf8::downgrade($c, 1) or return 0;    # must be a byte string
    return 0 unless utf8::decode($c);      # rejects overlongs, truncations
    # utf8::decode is lax: reject surrogates and code points above U+10FFFF
    return 0 if $c =~ /[^\x{0}-\x{D7FF}\x{E000}-\x{10FFFF}]/;
    return 1;
}

# Render a string given its value and whether the UTF8 flag is on.
sub render_string {
    my ($s, $is_utf8) = @_;
    my $out;
    if ($is_utf8) {
        $out = "$s";
    }
    else {
        my $bytes = "$s";
        utf8::downgrade($bytes, 1);
        if (is_strict_utf8_bytes($bytes)) {
            utf8::decode($bytes);
            $out = $bytes;
        }
        else {
            return { '$binary' => MIME::Base64::encode_base64($bytes, '') };
        }
    }
    die "Render: string collides with the internal number marker\n"
        if index($out, $NUM_MARK) == 0;
    return $out;
}

sub render_key {
    my ($k) = @_;
    if (utf8::is_utf8($k)) {
        return "$k";
    }
    my $bytes = "$k";
    if (is_strict_utf8_bytes($bytes)) {
        utf8::decode($bytes);
        return $bytes;
    }
    return '$binary:' . MIME::Base64::encode_base64($bytes, '');
}

sub render_number {
    my ($n) = @_;
    return 'NaN'       if $n != $n;
    return 'Infinity'  if $n == $INF;
    return '-Infinity' if $n == -$INF;
    return $NUM_MARK . sprintf('%.17g', $n);
}

# render_sv(\$value): render the scalar the reference points to.
sub render_sv {
    my ($r) = @_;
    if (ref $$r) {
        return render_ref($$r);
    }
    return undef unless defined $$r;
    if (builtin::is_bool($$r)) {
        return $$r ? JSON::XS::true() : JSON::XS::false();
    }
    my $obj = B::svref_2object($r);
    if ($obj->isa('B::SPECIAL')) {    # immortals such as PL_sv_zero
        my $copy = $$r;
        return render_sv(\$copy);
    }
    my $f = $obj->FLAGS;
    if ($f & B::SVf_POK) {
        return render_string($$r, $f & B::SVf_UTF8);
    }
    if ($f & B::SVf_IOK) {
        return ($f & B::SVf_IVisUV) ? $obj->UVX : $obj->IVX;
    }
    if ($f & B::SVf_NOK) {
        return render_number($$r);
    }
    # private flags only (should not happen for decoder output)
    if ($f & B::SVp_POK) {
        return render_string($$r, $f & B::SVf_UTF8);
    }
    if ($f & B::SVp_IOK) {
        return ($f & B::SVf_IVisUV) ? $obj->UVX : $obj->IVX;
    }
    if ($f & B::SVp_NOK) {
        return render_number($$r);
    }
    return render_string("$$r", utf8::is_utf8($$r));
}

sub render_ref {
    my ($ref) = @_;
    my $class = Scalar::Util::blessed($ref);
    if (re::is_regexp($ref)) {
        my ($pat, $mods) = re::regexp_pattern($ref);
        my $v = {
            '$regexp' => render_string($pat, utf8::is_utf8($pat)),
            '$flags'  => "$mods",
        };
        return $v if !defined $class || $class eq 'Regexp';
        return { '$object' => render_string($class, utf8::is_utf8($class)), '$value' => $v };
    }
    my $type = Scalar::Util::reftype($ref);
    my $val;
    if ($type eq 'ARRAY') {
        $val = [ map { render_sv(\$_) } @$ref ];
    }
    elsif ($type eq 'HASH') {
        my %out;
        for my $k (keys %$ref) {
            my $rk = render_key($k);
            die "Render: two hash keys render to the same string '$rk'\n"
                if exists $out{$rk};
            $out{$rk} = render_sv(\$ref->{$k});
        }
        $val = \%out;
    }
    elsif ($type eq 'SCALAR' || $type eq 'REF' || $type eq 'VSTRING' || $type eq 'LVALUE') {
        $val = render_sv($ref);
    }
    else {
        die "Render: unsupported reference type $type\n";
    }
    return $val unless defined $class;
    return { '$object' => render_string($class, utf8::is_utf8($class)), '$value' => $val };
}

# Render any Perl value (a plain scalar or a reference).
sub render {
    my ($data) = @_;
    return render_sv(\$_[0]);
}

# Rendered structure -> JSON text (UTF-8 bytes, canonical, trailing newline).
my $JSON = JSON::XS->new->utf8->canonical->allow_nonref;
sub to_json {
    my ($rendered) = @_;
    my $text = $JSON->encode($rendered);
    # number markers -> bare numbers. A string value opens right after one of
    # : [ , or at the start of the text; an escaped quote inside a string is
    # always preceded by a backslash, so it cannot match.
    $text =~ s/(?:^|(?<=[:\[,]))"\\u0001NUM:([-+0-9.eE]+)"/$1/g;
    return $text . "\n";
}

# Convenience: render and encode in one go.
sub render_json { return to_json(render($_[0])) }

# ---------------------------------------------------------------------------
# JSON::XS's own float parser is not correctly rounded (e.g. it parses "0.3"
# and ~20% of 15..17 significant digit numbers one ulp off, and subnormals
# badly). decode_json_exact() decodes JSON text (UTF-8 bytes) with JSON::XS
# but converts every non-integer number (and every integer of 19+ digits)
# with perl's own, correctly rounded, string->number conversion. Non-integers
# come back as NOK-only scalars; integers as IV/UV (NV if outside the 64-bit
# range; -2**63 is an IV, where JSON::XS would make it a string); JSON
# booleans stay JSON::PP::Boolean objects.
my $JSON_IN = JSON::XS->new->utf8->allow_nonref;

sub _mark_numbers {
    my ($t) = @_;
    my $out = '';
    pos($t) = 0;
    my $len = length $t;
    while (pos($t) < $len) {
        if ($t =~ /\G([^"\-0-9]+)/gc) {
            $out .= $1;
        }
        elsif ($t =~ /\G"/gc) {
            my $start = pos($t) - 1;
            my $end   = pos($t);
            while (1) {
                $end = index($t, '"', $end);
                die "decode_json_exact: unterminated string\n" if $end < 0;
                my $bs = 0;
                $bs++ while substr($t, $end - 1 - $bs, 1) eq '\\';
                last unless $bs % 2;
                $end++;
            }
            $out .= substr($t, $start, $end - $start + 1);
            pos($t) = $end + 1;
        }
        elsif ($t =~ /\G(-?[0-9]+)((?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)/gc) {
            my ($int, $rest) = ($1, $2);
            # long integers go through perl too: it yields an exact IV/UV
            # when in range (JSON::XS turns -2**63 into a string), else an NV
            if ($rest ne '' || length($int) >= 19) {
                $out .= '"\\u0001NUM:' . $int . $rest . '"';
            }
            else {
                $out .= $int;
            }
        }
        else {
            die "decode_json_exact: unexpected character at offset " . pos($t) . "\n";
        }
    }
    return $out;
}

sub _is_marker {    # without stringifying numbers (that would add flags)
    return 0 unless defined $_[0];
    return 0 unless B::svref_2object(\$_[0])->FLAGS & B::SVf_POK;
    return index($_[0], $NUM_MARK) == 0;
}

sub _unmark {
    my ($d) = @_;
    if (ref $d eq 'ARRAY') {
        for my $e (@$d) {
            if (ref $e) { _unmark($e) }
            elsif (_is_marker($e)) { $e = 0 + substr($e, length $NUM_MARK) }
        }
    }
    elsif (ref $d eq 'HASH') {
        for my $e (values %$d) {
            if (ref $e) { _unmark($e) }
            elsif (_is_marker($e)) { $e = 0 + substr($e, length $NUM_MARK) }
        }
    }
}

sub decode_json_exact {
    my ($text) = @_;
    my $data = $JSON_IN->decode(_mark_numbers($text));
    if (!ref $data) {
        $data = 0 + substr($data, length $NUM_MARK) if _is_marker($data);
        return $data;
    }
    _unmark($data);
    return $data;
}

# Is a rendered leaf a float marker? Returns the numeric string or undef.
sub float_marker {
    my ($v) = @_;
    return undef if ref $v || !_is_marker($v);
    return substr($v, length $NUM_MARK);
}

1;
