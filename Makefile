# fedbench — the two commands of the README are `make quickstart` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
OUT    ?= results
SCALE  ?= tiny

.PHONY: install quickstart test clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed  ## create .venv and install fedbench with its test extras

quickstart: install  ## run the embedded default scenario (offline digits) and print its table, write its curves
	$(BIN)/fedbench run configs/quickstart.yaml --out $(OUT)/quickstart
	$(BIN)/fedbench table --out $(OUT)/quickstart --scenario quickstart --no-show
	$(BIN)/fedbench plot --out $(OUT)/quickstart --scenario quickstart

test: install  ## the whole test suite (CPU, offline)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(OUT) .pytest_cache
