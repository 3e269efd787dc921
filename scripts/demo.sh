#!/usr/bin/env bash
# `make run`: what a newcomer should see in the first minute. Until the pipeline lands this shows
# the codec: events generated, packed the original way (protocol 3 + zlib + dedupe, what the
# Booking.com system stored) and the new default way (protocol 5 + zstd), read back, dumped, and
# the shared vectors from other implementations decoded.
set -euo pipefail
cd "$(dirname "$0")/.."
S=target/release/sluice
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1000 generated events (sluice gen), first one:"
$S gen --count 1000 --seed 7 > "$work/events.ndjson"
head -1 "$work/events.ndjson"
printf '%s bytes of NDJSON\n' "$(wc -c < "$work/events.ndjson")"

step "One second of events as one blob, two ways:"
$S gen --count 1000 --seed 7 --format sereal --protocol 3 --compress zlib --dedupe > "$work/original.srl"
$S gen --count 1000 --seed 7 --format sereal --protocol 5 --compress zstd --level 19 --dedupe > "$work/default.srl"
printf '  original (v3 + zlib + dedupe): %7d bytes\n' "$(wc -c < "$work/original.srl")"
printf '  default  (v5 + zstd + dedupe): %7d bytes\n' "$(wc -c < "$work/default.srl")"

step "Read back (sluice sereal decode | jq-able JSON), event 0 of the zlib blob:"
$S sereal decode "$work/original.srl" | head -c 400; echo " …"

if perl -MSereal::Decoder -e 1 2>/dev/null; then
  step "The Perl reference reads our blob too (Sereal::Decoder):"
  perl -MSereal::Decoder=decode_sereal -e 'local $/; my $d = decode_sereal(<STDIN>); my %n; $n{$_->{type}}++ for @$d;
    printf "  %d events: %s\n", scalar @$d, join(", ", map { "$_ $n{$_}" } sort keys %n)' < "$work/original.srl"
fi

step "Only some fields, read lazily (sluice sereal decode --select), first 5 events:"
$S sereal decode --select 'type,dc,status,timings.total_ms,experiments[*].id' "$work/default.srl" | head -5

step "The tags of a small document (sluice sereal decode --dump):"
echo '[{"cpu":5},{"cpu":99}]' | $S sereal encode --protocol 3 - | tee "$work/cpu.srl" | xxd -p
$S sereal decode --dump "$work/cpu.srl"

step "Documents written by other implementations (shared/sereal/vectors):"
for f in ../shared/sereal/vectors/ruby_test/example-perl-object.srl ../shared/sereal/vectors/Erlang_Sereal_test_cases_maps_tuple/test4.srl; do
  [[ -f $f ]] || continue
  printf '  %s:\n    ' "${f#../shared/sereal/vectors/}"
  $S sereal decode "$f" | head -c 300; echo
done

step "Bad input gives one line and exit 1:"
printf '=\xf3rl\x03\x00\x2b\x05\x01' | $S sereal decode - || echo "  (exit $?)"
