# fedbench — the two commands of the README are `make quickstart` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
OUT    ?= results
SCALE  ?= paper

LOCK    = requirements.lock
# pytest-xdist workers for make test: one per core, at most 4 (a run trains on one thread, engine/threads.py),
# handed two tests at a time in the suite's order (tests/conftest.py: the minutes-long ones first).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST  = OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist load --maxschedchunk 2

.PHONY: install quickstart test test-fast check-floors lock clean

# The exact versions of the lock (pip constraints); torch's CPU-only build where no NVIDIA GPU is present and
# PyTorch's CPU index answers, else PyPI's (scripts/torch_index.py says which; TORCH_INDEX=cpu|pypi forces it).
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(LOCK) $$($(PYTHON) scripts/torch_index.py) -e ".[test]"
	touch $@

install: $(VENV)/.installed  ## create .venv and install fedbench with its test extras, at the lock's versions

quickstart: install  ## run the embedded default scenario (offline digits) and print its table, write its curves
	$(BIN)/fedbench run configs/quickstart.yaml --out $(OUT)/quickstart
	$(BIN)/fedbench table --out $(OUT)/quickstart --scenario quickstart --no-show
	$(BIN)/fedbench plot --out $(OUT)/quickstart --scenario quickstart

test: install  ## the whole test suite (CPU, offline; about 10 min on 2 cores): what .ci/run calls
	$(PYTEST)

# Everything but the byte-for-byte regeneration of committed outputs and the slowest engine tests (under 5 min).
test-fast: install  ## a quick subset of the suite: not the `outputs` and `slow` markers
	$(PYTEST) -m "not outputs and not slow"

# make test lints and type-checks first ([tool.ruff] and [tool.mypy] in pyproject.toml, versions from the lock).
.PHONY: lint typecheck
test: lint typecheck

lint: install  ## ruff check and ruff format --check over the tree
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install  ## mypy over the packages [tool.mypy] lists
	$(BIN)/mypy

check-floors:  ## install the lowest versions pyproject.toml admits into .floors (needs PyPI) and run a smoke subset
	PYTHON=$(PYTHON) scripts/check_floors.sh

lock:  ## resolve pyproject.toml afresh into a scratch venv and write requirements.lock (then regenerate the outputs)
	PYTHON=$(PYTHON) scripts/lock.sh $(LOCK)

clean:
	rm -rf $(OUT) .pytest_cache

# Per-paper reproduction targets, one pattern rule over the paper rooms: `make reproduce-<paper>[-<target>]` runs
# `fedbench reproduce <paper> [<target>]`; the targets (scenario files, executor options, report steps) are declared
# in fedbench/papers/<paper>/room.py and listed by `make reproduce-list` (docs/reproduce.md). The rooms are the
# folders with a reference.yaml in fedbench/papers/ and in the folders of FEDBENCH_ROOMS (colon-separated), as
# fedbench/rooms.py finds them; no make file names a paper. Runs go to $(OUT)/$(SCALE) through the sweep engine,
# finished runs skipped; SWEEP_OPTS="--backend ray --address auto" runs them on a Ray cluster, "--jobs N" sets the
# local worker processes (default: every CPU at tiny, one otherwise; one torch thread per run), and the run options
# of `fedbench run` pass through too, e.g. SWEEP_OPTS="--device cuda --data-dir /data/fl" (docs/commands.md).
PAPER_OUT   = $(OUT)/$(SCALE)
SWEEP_OPTS ?=
REPRODUCE   = $(BIN)/fedbench reproduce
PAPER_OPTS  = --scale $(SCALE) --out $(PAPER_OUT) $(SWEEP_OPTS)
ROOM_DIRS   = fedbench/papers $(subst :, ,$(FEDBENCH_ROOMS))
PAPERS      = $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard $(addsuffix /*/reference.yaml,$(ROOM_DIRS)))))))
room_check  = $(if $(filter $(firstword $(subst -, ,$(1))),$(PAPERS)),,$(error no paper room for reproduce-$(1); rooms: $(PAPERS) (FEDBENCH_ROOMS adds folders of rooms)))

.PHONY: reproduce-list reproduce-table1 reproduce-all examples check-outputs
reproduce-list: install  ## every paper's targets (make reproduce-<paper>-<target>) with their run counts at SCALE
	$(REPRODUCE) --list --scale $(SCALE) --out $(PAPER_OUT)

reproduce-%: install  ## reproduce-<paper>: everything of a paper at SCALE; reproduce-<paper>-<target>: one target
	$(call room_check,$*)$(REPRODUCE) $(subst -, ,$*) $(PAPER_OPTS)

# The first table of every paper at SCALE, paper / ours: each room's first_table (C-FLAG's is its Table 2; FedCAMS's
# Table 1 is analytic, bits).
reproduce-table1: install  ## the first table of every paper at SCALE: paper / ours
	$(REPRODUCE) --first-tables $(PAPER_OPTS)

# Every committed output at SCALE (tiny: what tables/, figures/ and the README's numbers are made of).
reproduce-all: quickstart examples $(addprefix reproduce-,$(PAPERS))  ## every paper's tables, figures and claims at SCALE

# The examples whose table and curves are committed (fp64, so the same on every machine; about 30 s on 2 cores):
# FedAvg, MIFA and GradMA-S under Bernoulli client availability (docs/scenarios.md).
examples: install  ## the committed example outputs: configs/examples/availability.yaml's table and curves
	$(BIN)/fedbench run configs/examples/availability.yaml --out $(OUT)/examples --quiet
	$(BIN)/fedbench table --out $(OUT)/examples --scenario availability_bernoulli --no-show
	$(BIN)/fedbench plot --out $(OUT)/examples --scenario availability_bernoulli

# Regenerates every committed tiny output from a fresh store (CHECK_OUT) and fails if a committed table moved or a
# new one appeared (git status of tables/); tests/test_committed_outputs.py checks one table per paper in the suite.
CHECK_OUT ?= results/check
check-outputs: install  ## regenerate every committed tiny output from a fresh store; fail if tables/ changed
	rm -rf $(CHECK_OUT)
	$(MAKE) reproduce-all SCALE=tiny OUT=$(CHECK_OUT)
	@changed=$$(git status --porcelain -- tables/); if [ -n "$$changed" ]; then \
	  echo "committed tables differ from what today's code produces:"; echo "$$changed"; exit 1; fi
	@echo "every committed table regenerated byte-identical"

