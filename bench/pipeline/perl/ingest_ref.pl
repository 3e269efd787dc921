#!/usr/bin/perl
# Ingest anchor: the Perl reference turning JSON lines into the original blob form.
#
#   perl ingest_ref.pl --file EVENTS.ndjson
#
# Reads the file (untimed), then times, by process CPU time:
#   parse_encode: decode_json of every line, events grouped per (epoch, dc, type, subtype) in
#                 arrival order, each group of one second encoded with
#                 Sereal::Encoder {protocol_version 3, compress SRL_ZLIB, dedupe_strings 1}
#                 (the original system's blob form) when its second is over;
#   encode:       the encoding alone, on the already parsed groups (the design's anchor:
#                 "the Perl reference alone encodes the original form at ~150k events/s").
# Nothing is written to a store. Prints one line of JSON.
use strict;
use warnings;
use Getopt::Long;
use JSON::XS ();
use Sereal::Encoder qw(SRL_ZLIB);

my %o;
GetOptions(\%o, 'file=s') or die "bad options\n";
die "--file is required\n" unless defined $o{file};
open my $fh, '<:raw', $o{file} or die "cannot open $o{file}: $!\n";
my @lines = <$fh>;
close $fh;

my $cpu = eval {
    my $id = Time::HiRes::CLOCK_PROCESS_CPUTIME_ID();
    Time::HiRes::clock_gettime($id);
    sub { Time::HiRes::clock_gettime($id) };
} || sub { my ($u, $s) = times; $u + $s };
use Time::HiRes ();

my $json = JSON::XS->new;
my $enc = Sereal::Encoder->new({protocol_version => 3, compress => SRL_ZLIB, dedupe_strings => 1});

# Phase 1: parse + group + encode.
my ($events, $bytes, $blobs) = (0, 0, 0);
my @seconds;    # kept for phase 2: list of [group arrays] per second
my $c0 = $cpu->();
{
    my ($cur, %groups, @order);
    my $close = sub {
        my @g;
        for my $k (@order) {
            my $doc = $enc->encode($groups{$k});
            $bytes += length $doc;
            $blobs++;
            push @g, $groups{$k};
        }
        push @seconds, \@g;
        %groups = ();
        @order = ();
    };
    for my $line (@lines) {
        next unless $line =~ /\S/;
        my $e = $json->decode($line);
        $events++;
        my $ep = $e->{epoch};
        if (defined $cur && $ep != $cur) { $close->(); }
        $cur = $ep;
        my $k = join "\0", $e->{dc} // '', $e->{type} // '', $e->{subtype} // '';
        push @order, $k unless exists $groups{$k};
        push @{ $groups{$k} }, $e;
    }
    $close->() if %groups;
}
my $parse_encode_cpu = $cpu->() - $c0;

# Phase 2: encode only.
my $c1 = $cpu->();
my $sink;
for my $sec (@seconds) {
    $sink = $enc->encode($_) for @$sec;
}
my $encode_cpu = $cpu->() - $c1;

printf '{"events":%d,"blobs":%d,"bytes":%d,"parse_encode_cpu_s":%.6f,"encode_cpu_s":%.6f,'
     . '"encoder_version":"%s","json_xs_version":"%s"}' . "\n",
    $events, $blobs, $bytes, $parse_encode_cpu, $encode_cpu,
    $Sereal::Encoder::VERSION, $JSON::XS::VERSION;
