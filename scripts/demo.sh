#!/usr/bin/env bash
# `make run`: what a newcomer should see in the first minute. Starts `sluice serve` on a fresh
# data directory, feeds it live events from `sluice gen` over HTTP, follows them with
# `sluice tail`, reads a range back with `sluice cat`, shows a substream (a registered
# transformation whose small results a consumer reads instead of the full stream), shows the
# metrics, shuts down cleanly; then a look at the blobs themselves (Sereal, read by the Perl
# reference too).
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SLUICE_BIN:-target/release/sluice}
work=$(mktemp -d)
# HTTP on SLUICE_DEMO_PORT, TCP and UDP on the next two ports (all three move together).
port=${SLUICE_DEMO_PORT:-18180}
tcp_port=$((port + 1)) udp_port=$((port + 2))
url=http://127.0.0.1:$port
server=""
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "sluice serve --data $work/data --http 127.0.0.1:$port --tcp 127.0.0.1:$tcp_port --udp 127.0.0.1:$udp_port"
$S serve --data "$work/data" --http "127.0.0.1:$port" --tcp "127.0.0.1:$tcp_port" \
  --udp "127.0.0.1:$udp_port" --grace 1 2> "$work/serve.log" &
server=$!
for _ in $(seq 100); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if ! curl -fsS "$url/healthz"; then
  echo "sluice serve did not start; its log:" >&2
  cat "$work/serve.log" >&2
  echo "(a port in use? SLUICE_DEMO_PORT=NNNN make run moves HTTP to NNNN, TCP to NNNN+1, UDP to NNNN+2)" >&2
  exit 1
fi
echo

step "sluice substream add errors --type WEB --select status,path --where 'status >= 500'   (run on every blob stored from now on)"
$S substream add errors --type WEB --select status,path --where 'status >= 500' --server "$url" > /dev/null
$S substream list --server "$url"
step "sluice rollup add web --type WEB --group-by status --agg count,p95:timings.total_ms,distinct:ip   (aggregates kept at write time)"
$S rollup add web --type WEB --group-by status --agg count,p95:timings.total_ms,distinct:ip --step 10s --server "$url" > /dev/null 2>&1

step "sluice gen --live --rate 400 --http $url   (5 seconds of live WEB/CRON/LB events)"
$S gen --live --rate 400 --count 2000 --http "$url" &
gen=$!

step "sluice tail --server $url --type WEB --select epoch,dc,status,path   (live, as seconds are stored)"
$S tail --server "$url" --from -10s --type WEB --select epoch,dc,status,path --limit 8 2>/dev/null | head -8 || true
wait $gen

# The last second closes (grace 1 s) and is stored within about two seconds.
for _ in $(seq 50); do
  flushed=$(curl -fsS "$url/metrics" | awk '$1 == "sluice_events_flushed_total" {print $2}')
  [[ ${flushed:-0} -ge 2000 ]] && break
  sleep 0.2
done
step "sluice cat --server $url --from -1m   (a range, back in epoch order)"
total=$($S cat --server "$url" --from -1m | wc -l)
echo "$total events stored and readable"
echo "server errors, WEB only:  $S cat --server $url --from -1m --type WEB --where 'status >= 500' --select status,path"
$S cat --server "$url" --from -1m --type WEB --where 'status >= 500' --select status,path | head -3

step "The substream next to the full stream: sluice cat --server $url --from -1m --substream errors"
$S cat --server "$url" --from -1m --substream errors | head -3
full=$(curl -fsS "$url/v1/events?from=-1m" | wc -c)
sub=$(curl -fsS "$url/v1/events?from=-1m&substream=errors" | wc -c)
m=$(curl -fsS "$url/metrics")
blob_bytes=$(awk '$1 == "sluice_blob_bytes_written_total" {print $2}' <<< "$m")
sub_bytes=$(awk '$1 == "sluice_substream_result_bytes_total{substream=\"errors\"}" {print $2}' <<< "$m")
printf '  a consumer of 500s reads %d bytes of NDJSON instead of %d (%.1f%%); stored: %d result bytes beside %d bytes of blobs\n' \
  "$sub" "$full" "$(echo "100 * $sub / $full" | bc -l)" "${sub_bytes%.*}" "${blob_bytes%.*}"
echo "  sluice substream show errors: $($S substream show errors --server "$url" | sed -n '/"status": {/,/^  }/p' | tr -s ' \n' ' ')"

step "sluice rollup query web --from -1m --step 1m   (the states merged: counts, p95, distinct IPs per status)"
$S rollup query web --from -1m --step 1m --server "$url" | head -6

step "curl $url/metrics"
curl -fsS "$url/metrics" | grep -E '^sluice_(events_in|blobs_written|events_flushed|drops)' | head -8

step "SIGTERM: open seconds are stored, then the process exits"
kill -TERM "$server"; wait "$server" || true; server=""
echo "data directory: $(du -sh "$work/data" | cut -f1), $($S cat --data "$work/data" --from -2m | wc -l) events"

step "A stored blob is a Sereal document (+ '=chk' + SHA-1); the tags of a small one:"
echo '[{"cpu":5},{"cpu":99}]' | $S sereal encode --protocol 3 - | tee "$work/cpu.srl" | xxd -p
$S sereal decode --dump "$work/cpu.srl"

step "One second packed the original way (protocol 3 + zlib + dedupe) and the new default (protocol 5 + zstd):"
$S gen --count 1000 --seed 7 --format sereal --protocol 3 --compress zlib --dedupe > "$work/original.srl"
$S gen --count 1000 --seed 7 --format sereal --protocol 5 --compress zstd --dedupe > "$work/default.srl"
printf '  original: %7d bytes   default: %7d bytes   (NDJSON: %d bytes)\n' "$(wc -c < "$work/original.srl")" "$(wc -c < "$work/default.srl")" "$($S gen --count 1000 --seed 7 | wc -c)"
if perl -MSereal::Decoder -e 1 2>/dev/null; then
  perl -MSereal::Decoder=decode_sereal -e 'local $/; my $d = decode_sereal(<STDIN>); my %n; $n{$_->{type}}++ for @$d;
    printf "  the Perl reference reads it: %d events (%s)\n", scalar @$d, join(", ", map { "$_ $n{$_}" } sort keys %n)' < "$work/original.srl"
fi

step "Bad input gives one line and exit 1:"
printf '=\xf3rl\x03\x00\x2b\x05\x01' | $S sereal decode - || echo "  (exit $?)"
