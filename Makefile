# `make run` and `make test` each build .venv on first use (or when the dependencies change).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-quick bench clean

# torch first, alone: the pinned version is the local CPU build, so nothing pulls CUDA wheels.
# pip -qq prints errors only: a first run shows two lines, then the command's own output.
$(STAMP): pyproject.toml constraints.txt
	@echo "setting up $(VENV): rlplace and its pinned dependencies (first run: several minutes) ..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -qq --upgrade pip
	@$(BIN)/python -m pip install -qq -c constraints.txt torch
	@$(BIN)/python -m pip install -qq -c constraints.txt -e '.[all,test]'
	@touch $(STAMP)
	@echo "$(VENV) is ready"

run: $(STAMP)
	$(BIN)/rlplace-compare

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --durations=10

test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python experiments/bench_sim.py

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .hypothesis
