#!/usr/bin/env bash
# A short coverage-guided fuzz run of every target, seeded from fuzz/seeds (committed) and
# growing fuzz/corpus (not committed). Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
seconds=${1:-30}
if ! rustup toolchain list 2>/dev/null | grep -q nightly; then
  echo "fuzz: needs the nightly toolchain (rustup toolchain install nightly)" >&2; exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd fuzz
for target in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$target"
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run "$target" "corpus/$target" seeds -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1 2>&1 |
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done|==[0-9]+==|SUMMARY)" || true
  if ls artifacts/"$target"/crash-* >/dev/null 2>&1; then
    echo "fuzz: $target found crashes:" >&2; ls artifacts/"$target"/ >&2; exit 1
  fi
done
echo "fuzz: no crashes"
