# The commands a newcomer needs: `make demo`, `make up` (then `make down`) and `make test`.
# Each installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo up down test tools lint unit integration bench fuzz chaos kafka-start kafka-stop clean

# helm for the chart tests (tests/deploy), built once from the Go module proxy into .tools/bin
HELM_VERSION ?= v4.3.2
TOOLS := .tools/bin
HELM  := $(TOOLS)/helm
HELM_STAMP := $(TOOLS)/.helm-$(HELM_VERSION)
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/python -m pip install --upgrade pip > $(VENV)/install.log 2>&1 \
	  && $(BIN)/python -m pip install -e '.[dev]' >> $(VENV)/install.log 2>&1 \
	  || { tail -n 40 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

## Replay the bundled example provider streams through adapters and the Assembler, offline.
demo: $(STAMP)
	@bash scripts/demo

## The live pipeline on Kafka: broker, topics, two workers, the example executor, the recordings,
## a cancellation, a signed quarantine and a confirmation; prints a per-call summary, then stops
## everything it started. `make down` cleans up after an interrupted run.
up: $(STAMP)
	@$(BIN)/python scripts/demo_live.py up

down: $(STAMP)
	@$(BIN)/python scripts/demo_live.py down

## Everything CI checks: lint, types, architecture contracts, schema drift, all tests on a real broker.
test: $(STAMP) lint tools
	@export KAFKA_BOOTSTRAP_SERVERS="$${KAFKA_BOOTSTRAP_SERVERS:-$$(scripts/kafka-local start | tail -n 1)}"; \
	echo "Kafka at $$KAFKA_BOOTSTRAP_SERVERS"; \
	$(BIN)/python -m pytest -p no:cacheprovider -q --durations=25 $(PYTEST_ARGS)

## Build tools the tests need that PyPI does not ship (helm); skipped when already built.
tools: $(HELM_STAMP)

$(HELM_STAMP):
	@test -x "$(GO)" || { echo "Go is needed to build helm $(HELM_VERSION) (GO=$(GO))"; exit 1; }
	@mkdir -p $(TOOLS)
	@echo "building helm $(HELM_VERSION) into $(TOOLS) (go install; first run only)"
	GOBIN=$(CURDIR)/$(TOOLS) GOFLAGS=-buildvcs=false $(GO) install -ldflags='-s -w' helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	@touch $(HELM_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check processor tests bench scripts
	$(BIN)/ruff format --check processor
	$(BIN)/mypy --strict processor
	$(BIN)/lint-imports
	$(BIN)/processor schemas check

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/adapters

## Every benchmark (tens of minutes; the worker's on a real broker) → docs/benchmarks.md.
bench: $(STAMP)
	@export KAFKA_BOOTSTRAP_SERVERS="$${KAFKA_BOOTSTRAP_SERVERS:-$$(scripts/kafka-local start | tail -n 1)}"; \
	echo "Kafka at $$KAFKA_BOOTSTRAP_SERVERS"; \
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

## The long fuzz run: every target for DURATION seconds with SEED (a short run is in `make test`).
SEED ?= 0
DURATION ?= 120
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --seed $(SEED) --duration $(DURATION)

## Long chaos runs: each seed starts a broker of its own, 2,000 turns over 150 s, 7 faults
## (SIGKILL, SIGTERM, SIGSTOP of workers, kill -9 of the broker), and an executor group of
## CHAOS_EXECUTORS members with CHAOS_EXECUTOR_FAULTS faults of its own. Short runs: `make test`.
## BROKERS=3: a three-node KRaft cluster of its own per seed, and the cluster's faults too (kill -9
## of the busiest leader and of the active controller, a zombie broker, a rolling restart, a
## whole-cluster kill -9) over CHAOS_FAULTS faults and a longer load (CHAOS_DURATION: the cluster's
## faults take a minute or more each, applied one after another).
SEEDS ?= 1 2 3 4 5 21
CHAOS_DIR ?= /tmp/chaos
CHAOS_EXECUTORS ?= 2
CHAOS_EXECUTOR_FAULTS ?= 5
BROKERS ?= 1
CHAOS_FAULTS ?= $(if $(filter 1,$(BROKERS)),7,8)
CHAOS_DURATION ?= $(if $(filter 1,$(BROKERS)),150,420)
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos --seed $(SEEDS) --workdir $(CHAOS_DIR) --json $(CHAOS_DIR)/runs.jsonl \
	  --brokers $(BROKERS) --faults $(CHAOS_FAULTS) --duration $(CHAOS_DURATION) \
	  --executors $(CHAOS_EXECUTORS) --executor-faults $(CHAOS_EXECUTOR_FAULTS)

kafka-start:
	scripts/kafka-local start

kafka-stop:
	scripts/kafka-local stop

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .demo-live
