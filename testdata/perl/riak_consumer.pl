#!/usr/bin/perl
# A consumer written to the original article's recipe ("Using Riak as Events Storage"), with
# nothing but HTTP::Tiny and Sereal::Decoder (and the core Digest::SHA for the `=chk` check):
# for each second, fetch the listing GET /buckets/epochs/keys/<epoch>-<dc>, split it on `|`,
# prepend `<epoch>:<dc>:`, fetch each blob from /buckets/events/keys/<key>, check its `=chk` +
# SHA-1 trailer, decode it. Prints one line per event: `<epoch> <type> <subtype> <n-th event>`
# and a final `total <n>`; exits non-zero on a bad checksum or an HTTP error other than 404.
#
#   perl riak_consumer.pl BASE_URL DC FROM_EPOCH TO_EPOCH   (TO excluded)
use strict;
use warnings;
use HTTP::Tiny;
use Sereal::Decoder qw(decode_sereal);
use Digest::SHA qw(sha1);

my ($base, $dc, $from, $to) = @ARGV;
die "usage: $0 BASE_URL DC FROM TO\n" unless defined $to;
my $http = HTTP::Tiny->new(timeout => 10);
my $total = 0;
for my $epoch ($from .. $to - 1) {
    my $res = $http->get("$base/buckets/epochs/keys/$epoch-$dc");
    next if $res->{status} == 404;
    die "listing $epoch-$dc: $res->{status} $res->{reason}\n" unless $res->{success};
    for my $entry (split /\|/, $res->{content}) {
        my $key = "$epoch:$dc:$entry";
        my $blob = $http->get("$base/buckets/events/keys/$key");
        die "blob $key: $blob->{status} $blob->{reason}\n" unless $blob->{success};
        my $bytes = $blob->{content};
        die "blob $key: too short\n" if length($bytes) < 24;
        my $doc = substr($bytes, 0, length($bytes) - 24);
        my $trailer = substr($bytes, -24);
        die "blob $key: no =chk trailer\n" unless substr($trailer, 0, 4) eq '=chk';
        die "blob $key: SHA-1 mismatch\n" unless substr($trailer, 4) eq sha1($doc);
        my $events = decode_sereal($doc);
        die "blob $key: not an array\n" unless ref $events eq 'ARRAY';
        my ($type, $subtype) = split /:/, $entry, -1;
        for my $ev (@$events) {
            die "blob $key: event not a hash\n" unless ref $ev eq 'HASH';
            print "$epoch $type $subtype\n";
            $total++;
        }
    }
}
print "total $total\n";
