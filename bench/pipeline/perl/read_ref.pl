#!/usr/bin/perl
# Read anchor: the Perl reference decoding stored blobs.
#
#   perl read_ref.pl --file BLOBS.bin [--select a,b,c.d] [--min-status 500]
#
# BLOBS.bin is a sequence of (u32 little-endian length, blob bytes). Each blob is a Sereal
# document followed by `=chk` + the 20-byte SHA-1 of the document. Reads the file (untimed),
# then times, by process CPU time:
#   select: per blob, verify the SHA-1, strip the 24-byte trailer, decode, keep events with
#           status >= --min-status, and build a hash of the --select fields (dotted paths);
#   full:   per blob, verify, strip, decode (every event fully decoded, no filter).
# Prints one line of JSON.
use strict;
use warnings;
use Getopt::Long;
use Time::HiRes ();
use Digest::SHA qw(sha1);
use Sereal::Decoder;

my %o = (select => 'path,request_id,timings.total_ms', 'min-status' => 500);
GetOptions(\%o, 'file=s', 'select=s', 'min-status=i') or die "bad options\n";
die "--file is required\n" unless defined $o{file};
open my $fh, '<:raw', $o{file} or die "cannot open $o{file}: $!\n";
my $all = do { local $/; <$fh> };
close $fh;
my @blobs;
for (my $p = 0; $p < length $all;) {
    my $n = unpack 'V', substr($all, $p, 4);
    push @blobs, substr($all, $p + 4, $n);
    $p += 4 + $n;
}
undef $all;
my @paths = map { [ $_, [ split /\./ ] ] } split /,/, $o{select};
my $min = $o{'min-status'};

my $cpu = eval {
    my $id = Time::HiRes::CLOCK_PROCESS_CPUTIME_ID();
    Time::HiRes::clock_gettime($id);
    sub { Time::HiRes::clock_gettime($id) };
} || sub { my ($u, $s) = times; $u + $s };

my $dec = Sereal::Decoder->new();
sub body {
    my ($b) = @_;
    my $doc = substr($b, 0, length($b) - 24);
    die "bad trailer\n" unless substr($b, -24, 4) eq '=chk';
    die "checksum mismatch\n" unless sha1($doc) eq substr($b, -20);
    return $dec->decode($doc);
}

my ($matched, $events) = (0, 0);
my $c0 = $cpu->();
my @out;
for my $b (@blobs) {
    my $evs = body($b);
    for my $e (@$evs) {
        next unless defined $e->{status} && $e->{status} >= $min;
        my %r;
        for my $p (@paths) {
            my $v = $e;
            for my $k (@{ $p->[1] }) { $v = ref $v eq 'HASH' ? $v->{$k} : undef; }
            $r{ $p->[0] } = $v;
        }
        push @out, \%r;
        $matched++;
    }
    @out = ();
}
my $select_cpu = $cpu->() - $c0;

my $c1 = $cpu->();
for my $b (@blobs) {
    my $evs = body($b);
    $events += @$evs;
}
my $full_cpu = $cpu->() - $c1;

printf '{"blobs":%d,"events":%d,"matched":%d,"select_cpu_s":%.6f,"full_cpu_s":%.6f,"decoder_version":"%s"}' . "\n",
    scalar(@blobs), $events, $matched, $select_cpu, $full_cpu, $Sereal::Decoder::VERSION;
