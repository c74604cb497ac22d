# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit integration bench fuzz kafka-start kafka-stop clean

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

## Everything CI checks: lint, types, architecture contracts, schema drift, all tests on a real broker.
test: $(STAMP) lint
	@export KAFKA_BOOTSTRAP_SERVERS="$${KAFKA_BOOTSTRAP_SERVERS:-$$(scripts/kafka-local start | tail -n 1)}"; \
	echo "Kafka at $$KAFKA_BOOTSTRAP_SERVERS"; \
	$(BIN)/python -m pytest -p no:cacheprovider -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check processor tests bench
	$(BIN)/ruff format --check processor
	$(BIN)/mypy --strict processor
	$(BIN)/lint-imports
	$(BIN)/processor schemas check

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/adapters

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

## The long fuzz run: every target for DURATION seconds with SEED (a short run is in `make test`).
SEED ?= 0
DURATION ?= 120
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --seed $(SEED) --duration $(DURATION)

kafka-start:
	scripts/kafka-local start

kafka-stop:
	scripts/kafka-local stop

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
