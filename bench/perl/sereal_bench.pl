#!/usr/bin/perl
# Throughput of the Perl reference (Sereal::Encoder / Sereal::Decoder) on one document.
#
#   perl sereal_bench.pl --file DOC.srl [--protocol 3] [--compress none|snappy|zlib|zstd]
#        [--level N] [--dedupe 0|1] [--min-time 1.0] [--min-iters 5]
#
# Decodes DOC once to get the data, then times, each for at least --min-time seconds of wall
# time and --min-iters iterations (whichever comes later):
#   encode: Sereal::Encoder->encode(data) with the given options (one reused encoder object);
#   decode: Sereal::Decoder->decode(DOC)  (one reused decoder object).
# Prints one line of JSON. Throughput is in MB/s (10^6 bytes) of DOC's size per second of
# process CPU time, for both directions, so that it compares with the Rust side which uses
# the same document size.
use strict;
use warnings;
use Getopt::Long;
use Time::HiRes qw(time);
use Sereal::Encoder qw(SRL_UNCOMPRESSED SRL_SNAPPY SRL_ZLIB SRL_ZSTD);
use Sereal::Decoder;

my %o = (protocol => 3, compress => 'none', level => undef, dedupe => 0,
         'min-time' => 1.0, 'min-iters' => 5);
GetOptions(\%o, 'file=s', 'protocol=i', 'compress=s', 'level=i', 'dedupe=i',
           'min-time=f', 'min-iters=i') or die "bad options\n";
die "--file is required\n" unless defined $o{file};

my $doc = do {
    open my $fh, '<:raw', $o{file} or die "cannot open $o{file}: $!\n";
    local $/;
    <$fh>;
};
my $doc_bytes = length $doc;

my %compress = (none => SRL_UNCOMPRESSED, snappy => SRL_SNAPPY, zlib => SRL_ZLIB, zstd => SRL_ZSTD);
die "unknown --compress $o{compress}\n" unless exists $compress{$o{compress}};
my %enc_opts = (
    protocol_version => $o{protocol},
    compress         => $compress{$o{compress}},
    dedupe_strings   => $o{dedupe} ? 1 : 0,
);
$enc_opts{compress_level} = $o{level} if defined $o{level} && $o{compress} =~ /^(zlib|zstd)$/;

my $dec = Sereal::Decoder->new();
my $enc = Sereal::Encoder->new(\%enc_opts);
my $data = $dec->decode($doc);
my $encoded = $enc->encode($data);   # warm-up, and the size of the reference's output

# Process CPU time: clock_gettime(CLOCK_PROCESS_CPUTIME_ID) where Time::HiRes has it, else times().
my $cpu = eval {
    my $id = Time::HiRes::CLOCK_PROCESS_CPUTIME_ID();
    Time::HiRes::clock_gettime($id);
    sub { Time::HiRes::clock_gettime($id) };
} || sub { my ($u, $s) = times; $u + $s };

sub run_loop {
    my ($body) = @_;
    my ($iters, $w0, $c0) = (0, time, $cpu->());
    while (1) {
        $body->();
        $iters++;
        last if $iters >= $o{'min-iters'} && time - $w0 >= $o{'min-time'};
    }
    return ($iters, $cpu->() - $c0, time - $w0);
}

my $sink;
my ($enc_iters, $enc_cpu, $enc_wall) = run_loop(sub { $sink = $enc->encode($data) });
my ($dec_iters, $dec_cpu, $dec_wall) = run_loop(sub { $sink = $dec->decode($doc) });
undef $sink;

my $mbps = sub { my ($n, $s) = @_; $s > 0 ? $doc_bytes * $n / $s / 1e6 : 0 };
printf '{"encode_mbps":%.3f,"decode_mbps":%.3f,"doc_bytes":%d,"encoded_bytes":%d,'
     . '"encode_iters":%d,"encode_cpu_s":%.6f,"encode_wall_s":%.6f,'
     . '"decode_iters":%d,"decode_cpu_s":%.6f,"decode_wall_s":%.6f,'
     . '"encoder_version":"%s","decoder_version":"%s"}' . "\n",
    $mbps->($enc_iters, $enc_cpu), $mbps->($dec_iters, $dec_cpu), $doc_bytes, length $encoded,
    $enc_iters, $enc_cpu, $enc_wall, $dec_iters, $dec_cpu, $dec_wall,
    $Sereal::Encoder::VERSION, $Sereal::Decoder::VERSION;
