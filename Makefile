# Sluice — the two commands a newcomer needs are `make run` and `make test`.
# Every target installs what it needs (idempotently) on a fresh Debian 12 machine.

CARGO ?= cargo
SHELL := /bin/bash

.PHONY: all deps build run test test-python bench bench-python bench-pipeline bench-store fuzz clean

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
## Python workers with the interpreter in SLUICE_PYTHON.
test: deps
	set -o pipefail; SLUICE_PYTHON=$$(scripts/python-setup.sh | tail -n 1) && export SLUICE_PYTHON && \
	  $(CARGO) test --workspace --no-fail-fast
	$(MAKE) test-python

## test-python: the `sluice` Python package (python/): venv + maturin build, then pytest against
## a real `sluice serve` and the Perl reference.
test-python: deps
	$(CARGO) build -p sluice
	@PY=$$(scripts/python-setup.sh | tail -n 1) && cd python && \
	  SLUICE_BIN=$(CURDIR)/target/debug/sluice $$PY -m pytest -q tests

## bench: throughput against the Perl reference, as a table (targets, not tests); then the
## Python package's rows (bench-python).
bench: deps
	$(CARGO) run --release -p sluice-bench
	$(MAKE) bench-python

## bench-python: sluice.sereal dumps/loads vs orjson and json on the same events; emit() cost.
bench-python: deps
	@PY=$$(scripts/python-setup.sh | tail -n 1) && $$PY python/bench/bench.py

## bench-pipeline: the pipeline rows of issue 3 (ingest, read CPU, UDP vs statsd, bytes/event, latency).
bench-pipeline: deps
	$(CARGO) run --release -p sluice-pipeline-bench

## bench-store: the embedded-store engine comparison behind docs/decisions.md.
bench-store:
	$(CARGO) run --release -p sluice-store-bench

## fuzz: a short coverage-guided run of every fuzz target (needs the nightly toolchain).
FUZZ_SECONDS ?= 30
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	$(CARGO) clean
