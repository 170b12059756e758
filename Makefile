# The two front-door commands: `make up` (install and run the embedded stack) and `make test` (install and run
# every test, unit and integration, on a real Apache Kafka broker, tansu, Ray and Serve).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
MERMAID := tools/mermaid-check/node_modules/.installed

.PHONY: install up test test-fast bench

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

$(MERMAID): tools/mermaid-check/package-lock.json
	npm ci --prefix tools/mermaid-check --no-audit --no-fund --loglevel=error
	touch $@

install: $(INSTALLED)

up: $(INSTALLED)
	$(BIN)/mnemoflow up

test: $(INSTALLED) $(MERMAID)
	bash tests/kafka/fetch.sh > /dev/null
	$(BIN)/python -m pytest

test-fast: $(INSTALLED)
	$(BIN)/python -m pytest -m "not integration"

bench: $(INSTALLED)
	bash tests/kafka/fetch.sh > /dev/null
	$(BIN)/python bench/ingest.py --quick
