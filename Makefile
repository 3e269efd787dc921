# Sluice — the two commands a newcomer needs are `make run` and `make test`.
# Every target installs what it needs (idempotently) on a fresh Debian 12 machine.

CARGO ?= cargo
SHELL := /bin/bash

.PHONY: all deps build run test cassandra-test test-python test-js test-go wheel bench bench-python bench-pipeline bench-wrk bench-store bench-history bench-metrics bench-metrics-statsd bench-alerts fuzz clean

all: build

## deps: the Perl Sereal reference (the oracle in tests and the anchor in benches) and a Rust toolchain.
deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release -p sluice

## run: the demo (scripts/demo.sh): `sluice serve` on a fresh data directory, live events from
## `sluice gen` over HTTP, followed with `sluice tail`, read back with `sluice cat`, metrics, a clean
## shutdown, then the blobs themselves (read by the Perl reference too).
run: build
	@scripts/demo.sh

## test: every test, against the real Perl reference (Rust, then the Python package). The Python
## package is set up first: the code-substream worker pool's tests (crates/pyworkers) run real
## Python workers with the interpreter in SLUICE_PYTHON. The Cassandra tests start a real cluster
## with scripts/cassandra.sh (shared by every test binary), stopped at the end;
## SLUICE_SKIP_CASSANDRA=1 skips them (each prints SKIPPED). The statsd test's npm client
## (hot-shots) is installed outside the repository by scripts/node-deps.sh (SLUICE_NODE_MODULES).
## The alert-notification tests start their own Alertmanager each (scripts/alertmanager.sh, built
## once into ~/.cache/sluice/bin; SLUICE_SKIP_ALERTMANAGER=1 skips them); any left over is stopped.
## Headless Chromium for the browser tests (the console, cross-site) comes from scripts/chromium.sh;
## SLUICE_SKIP_BROWSER=1 skips the console test (it prints SKIPPED).
test: deps
	@scripts/chromium.sh
	@set -o pipefail; SLUICE_PYTHON=$$(scripts/python-setup.sh | tail -n 1) && export SLUICE_PYTHON && \
	  SLUICE_NODE_MODULES=$$(scripts/node-deps.sh | tail -n 1) && export SLUICE_NODE_MODULES && \
	  status=0; start=$$SECONDS; $(CARGO) test --workspace --no-run || status=$$?; built=$$SECONDS; \
	  if [ $$status = 0 ]; then $(CARGO) test --workspace --no-fail-fast || status=$$?; fi; \
	  echo "make test: build $$((built - start)) s, Rust tests $$((SECONDS - built)) s"; \
	  if [ "$${SLUICE_SKIP_CASSANDRA:-}" != 1 ]; then scripts/cassandra.sh stop; fi; scripts/seaweedfs.sh stop; scripts/victoriametrics.sh stop; scripts/alertmanager.sh stop-all; exit $$status
	$(MAKE) test-python
	$(MAKE) test-js
	$(MAKE) test-go

## cassandra-test: only the Cassandra backend's tests (contract suite, TTL, end to end, outage, RF 3).
cassandra-test:
	@status=0; $(CARGO) test -p sluice-store-cassandra || status=$$?; \
	  $(CARGO) test -p sluice --test cassandra --test cassandra_outage --test cassandra_rf3 || status=$$?; \
	  scripts/cassandra.sh stop; exit $$status

## test-python: the `sluice` Python package (python/): venv + maturin build, then pytest against
## a real `sluice serve` and the Perl reference. The wheel it installs is the natively linked one
## (it reuses python/target: no second build); SLUICE_WHEEL_ZIG=1 tests `make wheel`'s zig one.
test-python: deps
	$(CARGO) build -p sluice
	@PY=$$(scripts/python-setup.sh | tail -n 1) && WHEEL=$$(SLUICE_WHEEL_ZIG=$${SLUICE_WHEEL_ZIG:-0} scripts/python-wheel.sh | tail -n 1) && cd python && \
	  SLUICE_BIN=$(CURDIR)/target/debug/sluice SLUICE_WHEEL=$$WHEEL $$PY -m pytest -q tests

## wheel: the `sluice` Python package as an abi3 manylinux wheel in dist/ (installs without Rust:
## `pip install dist/sluice-*.whl`).
wheel: deps
	@scripts/python-wheel.sh

## test-js: the JavaScript/TypeScript SDK (sdk/js): `node --test` (Node >= 20, scripts/node20.sh)
## against real `sluice serve` processes (emit over each transport, reads, tails, tokens/TLS, a
## SIGKILL-and-restart under steady emitters, the disk buffer, drops in the counts).
test-js: deps
	$(CARGO) build -p sluice
	@NODE=$$(scripts/node20.sh | tail -n 1) && cd sdk/js && \
	  SLUICE_BIN=$(CURDIR)/target/debug/sluice $$NODE --test --test-concurrency=1 test/*.test.js

## test-go: the Go SDK (sdk/go, standard library only): `go test` (Go >= 1.23 from
## scripts/go.sh: the one in PATH, else fetched from the Go module proxy into the cache) against real `sluice serve` processes (emit over each
## transport, where/select, tails resumed from a cursor, tokens/TLS, a SIGKILL-and-restart under
## steady emitters, the disk buffer, drops in the counts).
test-go: deps
	$(CARGO) build -p sluice
	@GO=$$(scripts/go.sh | tail -n 1) && cd sdk/go && \
	  SLUICE_BIN=$(CURDIR)/target/debug/sluice $$GO test -count=1 -timeout 20m ./...

## bench: throughput against the Perl reference, as a table (targets, not tests); then the
## Python package's rows (bench-python).
bench: deps
	$(CARGO) run --release -p sluice-bench
	$(MAKE) bench-python

## bench-python: sluice.sereal dumps/loads vs orjson and json on the same events; emit() cost.
bench-python: deps
	@PY=$$(scripts/python-setup.sh | tail -n 1) && $$PY python/bench/bench.py

## bench-pipeline: the pipeline rows (ingest, read CPU, UDP vs statsd, bytes/event, latency).
## Row 6 (Cassandra vs embedded) starts a local cluster with scripts/cassandra.sh; stopped after.
bench-pipeline: deps bench-wrk
	$(CARGO) build --release -p sluice
	@status=0; $(CARGO) run --release -p sluice-pipeline-bench || status=$$?; \
	  if [ "$${SLUICE_SKIP_CASSANDRA:-}" != 1 ]; then scripts/cassandra.sh stop; fi; exit $$status

## bench-wrk: the HTTP load generator of the shards and http rows (Debian package wrk; idempotent).
bench-wrk:
	@command -v wrk >/dev/null || apt-get install -y wrk || (apt-get update && apt-get install -y wrk)

## bench-history: history queries, bytes and ingest CPU beside VictoriaLogs (built once from the Go
## module proxy into ~/.cache/sluice by scripts/victorialogs.sh), one run, same client
## (bench/history, crate sluice-history-bench); the table goes to bench/history/RESULTS.md.
bench-history: deps
	@scripts/victorialogs.sh build
	$(CARGO) build --release -p sluice
	$(CARGO) run --release -p sluice-history-bench

## bench-metrics: issue 25's metrics rows, each beside an anchor measured in the same run. The rollup
## rows (bench/rollups, crate sluice-rollups-bench): the ingest CPU one rollup of 3 aggregations adds
## at a fixed offered rate, and a day's rollup query beside the same answer read from the events
## (table in bench/rollups/RESULTS.md); then the statsd row (bench-metrics-statsd). Both run even
## when the first reports a wrong answer (exit 3); the status is the first failure's.
bench-metrics: deps
	$(CARGO) build --release -p sluice -p sluice-rollups-bench
	@status=0; $(CARGO) run --release -p sluice-rollups-bench || status=$$?; \
	  $(MAKE) bench-metrics-statsd || { [ $$status != 0 ] || status=$$?; }; exit $$status

## bench-alerts: the alert engine — event → notification (webhook) and 1,000 rules' cost
## (bench/alerts/RESULTS.md).
bench-alerts: deps
	$(CARGO) build --release -p sluice
	python3 bench/alerts/bench.py

## bench-store: the embedded-store engine comparison behind docs/decisions.md.
bench-store:
	$(CARGO) run --release -p sluice-store-bench

## bench-metrics-statsd: issue 25's statsd row (bench/metrics/run.py): datagrams/s at which >= 99.9 % of
## N are received and counted, Sluice beside Etsy statsd (npm) and statsd_exporter (Go module proxy),
## both cached under ~/.cache/sluice; the table goes to bench/metrics/RESULTS.md.
bench-metrics-statsd: deps
	python3 bench/metrics/run.py --write

## fuzz: a short coverage-guided run of every fuzz target (needs the nightly toolchain).
FUZZ_SECONDS ?= 30
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	$(CARGO) clean
