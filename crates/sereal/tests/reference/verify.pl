#!/usr/bin/perl
# verify.pl DIR
#   For each DIR/<name>.srl (made by the Rust encoder) with a DIR/<name>.json
#   (the data that was encoded): decode the .srl with Sereal::Decoder (the
#   reference), render it with Render.pm and compare it structurally with the
#   JSON data. Prints "ok <name>" / "not ok <name>: <difference>", then
#   "N passed, M failed"; exits 1 if anything failed.
#
# verify.pl --decoded DIR      (alias: --expect-json)
#   For each DIR/<name>.srl write DIR/<name>.ref.json: the reference decoder's
#   rendering of it. A .srl the reference cannot decode is reported as
#   "not ok" (and no .ref.json is written); exit 1 if any failed.
use strict;
use warnings;
no warnings 'experimental::builtin';
no warnings 'recursion';
use FindBin;
use lib $FindBin::Bin;
use Render;
use B ();
use JSON::XS ();
use Scalar::Util qw(blessed);
use Sereal::Decoder ();

my $mode = 'verify';
if (@ARGV && $ARGV[0] =~ /^--(decoded|expect-json)$/) {
    $mode = 'decoded';
    shift @ARGV;
}
my $dir = shift @ARGV;
die "usage: $0 [--decoded] DIR\n" unless defined $dir && -d $dir && !@ARGV;

binmode STDOUT, ':encoding(UTF-8)';
$| = 1;

my $JSON = JSON::XS->new->utf8->allow_nonref;

sub slurp {
    my ($path) = @_;
    open my $fh, '<:raw', $path or die "open $path: $!\n";
    local $/;
    my $d = <$fh>;
    return $d // '';
}

sub write_file {
    my ($path, $bytes) = @_;
    open my $fh, '>:raw', $path or die "open $path: $!";
    print {$fh} $bytes or die "write $path: $!";
    close $fh or die "close $path: $!";
}

# Decode a .srl with the reference. Returns (ok, value-or-error).
sub ref_decode {
    my ($srl) = @_;
    my $out;
    my $ok = eval {
        local $SIG{__WARN__} = sub { };
        # fresh decoder, one-argument form: Sereal::Decoder 5.003 corrupts
        # refcounts when a decoder is reused with decode($srl, $out) after
        # an OBJECT_FREEZE document
        $out = Sereal::Decoder->new->decode($srl);
        1;
    };
    return (0, ($@ =~ s/ at \S+ line \d+\.?\s*\z//r =~ s/\s+\z//r)) unless $ok;
    return (1, $out);
}

# ---------------------------------------------------------------------------
# Structural comparison of a rendered value ($r, from Render.pm) with a value
# from JSON::XS decoding ($j). Returns '' if equal, else a description of the
# first difference (with its path).
sub num_kind {    # for JSON::XS-decoded scalars
    my ($v) = @_;
    my $f = B::svref_2object(\$v)->FLAGS;
    return 'str'   if $f & B::SVf_POK;
    return 'int'   if $f & B::SVf_IOK;
    return 'float' if $f & B::SVf_NOK;
    return 'str';
}

sub describe {
    my ($v) = @_;
    return 'null' unless defined $v;
    if (blessed($v) && $v->isa('JSON::PP::Boolean')) { return $v ? 'true' : 'false' }
    if (ref $v eq 'HASH') {
        return '{"$binary":...}' if exists $v->{'$binary'} && keys %$v == 1;
        return 'object';
    }
    return 'array' if ref $v eq 'ARRAY';
    my $fm = Render::float_marker($v);
    return "number $fm" if defined $fm;
    my $s = "$v";
    $s = substr($s, 0, 60) . '...' if length $s > 60;
    return B::svref_2object(\$v)->FLAGS & B::SVf_POK ? qq("$s") : "number $s";
}

# rendered leaf -> ('int', value) / ('float', value) / ('str', value) /
# ('special', 'NaN') etc.
sub rendered_kind {
    my ($v) = @_;
    my $fm = Render::float_marker($v);
    return ('float', $fm + 0) if defined $fm;
    my $f = B::svref_2object(\$v)->FLAGS;
    return ('str', $v) if $f & B::SVf_POK;
    return ('int', $v) if $f & (B::SVf_IOK | B::SVp_IOK);
    return ('float', $v) if $f & (B::SVf_NOK | B::SVp_NOK);
    return ('str', "$v");
}

sub num_equal {
    my ($ka, $a, $kb, $b) = @_;
    if ($ka eq 'int' && $kb eq 'int') {
        return "$a" eq "$b";
    }
    return $a == $b;    # float vs float, or float vs int (numeric equality)
}

sub compare {
    my ($r, $j, $path) = @_;
    my $jb = blessed($j) && $j->isa('JSON::PP::Boolean');
    my $rb = blessed($r) && $r->isa('JSON::PP::Boolean');
    if (!defined $j || !defined $r) {
        return '' if !defined $j && !defined $r;
        return "$path: expected " . describe($j) . ", got " . describe($r);
    }
    if ($jb || $rb) {
        return "$path: expected " . describe($j) . ", got " . describe($r)
            unless $jb && $rb && (!!$j == !!$r);
        return '';
    }
    if (ref $j eq 'HASH') {
        return "$path: expected object, got " . describe($r) unless ref $r eq 'HASH';
        my @jk = sort keys %$j;
        my @rk = sort keys %$r;
        for my $k (@jk) {
            return "$path: missing key " . $JSON->encode($k) unless exists $r->{$k};
        }
        for my $k (@rk) {
            return "$path: unexpected key " . $JSON->encode($k) unless exists $j->{$k};
        }
        for my $k (@jk) {
            my $e = compare($r->{$k}, $j->{$k}, $path . '.' . ($k =~ /^[A-Za-z_][A-Za-z0-9_]*\z/ ? $k : $JSON->encode($k)));
            return $e if $e;
        }
        return '';
    }
    if (ref $j eq 'ARRAY') {
        return "$path: expected array, got " . describe($r) unless ref $r eq 'ARRAY';
        return "$path: expected array of " . scalar(@$j) . " elements, got " . scalar(@$r)
            if @$j != @$r;
        for my $i (0 .. $#$j) {
            my $e = compare($r->[$i], $j->[$i], "$path\[$i]");
            return $e if $e;
        }
        return '';
    }
    if (ref $j) {
        return "$path: unexpected JSON value type " . ref($j);
    }
    # $j is a plain scalar (string or number)
    return "$path: expected " . describe($j) . ", got " . describe($r) if ref $r;
    my $kj = num_kind($j);
    my ($kr, $vr) = rendered_kind($r);
    if ($kj eq 'str') {
        return '' if $kr eq 'str' && $vr eq $j;
        return "$path: expected " . describe($j) . ", got " . describe($r);
    }
    # JSON number
    if ($kr eq 'str') {
        return "$path: expected " . describe($j) . ", got " . describe($r);
    }
    return '' if num_equal($kr, $vr, $kj, $j);
    return "$path: expected " . describe($j) . ", got " . describe($r);
}

# ---------------------------------------------------------------------------
opendir my $dh, $dir or die "opendir $dir: $!\n";
my @names = sort map { /^(.+)\.srl\z/ ? $1 : () } readdir $dh;
closedir $dh;

my ($pass, $fail) = (0, 0);
for my $name (@names) {
    my $srl = slurp("$dir/$name.srl");
    my ($ok, $val) = ref_decode($srl);
    if ($mode eq 'decoded') {
        if (!$ok) {
            print "not ok $name: reference decoder died: $val\n";
            $fail++;
            next;
        }
        my $json = eval { Render::render_json($val) };
        if (!defined $json) {
            print "not ok $name: cannot render: ", ($@ =~ s/\s+\z//r), "\n";
            $fail++;
            next;
        }
        write_file("$dir/$name.ref.json", $json);
        print "ok $name\n";
        $pass++;
        next;
    }
    if (!-e "$dir/$name.json") {
        print "not ok $name: missing $name.json\n";
        $fail++;
        next;
    }
    if (!$ok) {
        print "not ok $name: reference decoder died: $val\n";
        $fail++;
        next;
    }
    my $want = eval { Render::decode_json_exact(slurp("$dir/$name.json")) };
    if ($@) {
        print "not ok $name: cannot parse $name.json: ", ($@ =~ s/\s+\z//r), "\n";
        $fail++;
        next;
    }
    my $got = eval { Render::render($val) };
    if ($@) {
        print "not ok $name: cannot render: ", ($@ =~ s/\s+\z//r), "\n";
        $fail++;
        next;
    }
    my $diff = compare($got, $want, '$');
    if ($diff eq '') {
        print "ok $name\n";
        $pass++;
    }
    else {
        print "not ok $name: $diff\n";
        $fail++;
    }
}
print "$pass passed, $fail failed\n";
exit($fail ? 1 : 0);
