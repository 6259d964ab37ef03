# make demo / make test: each creates .venv if missing, installs the project with pinned dependencies, then runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint docs install clean bench-myopia

# requirements.txt pins the core and every extra ([eval], [gguf], [dev]), so demo and test have all they need.
$(STAMP): pyproject.toml requirements.txt requirements-nodeps.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --upgrade --target $(VENV)/assets -r requirements-nodeps.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/forethought demo

test: $(STAMP)
	$(BIN)/pip check --disable-pip-version-check
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n 2 --dist loadscope

# pycodestyle, pyupgrade, bugbear, import order, pyflakes (the selection is in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# docs/results/*.md and README's headline block, from benchmarks/results/*.json
docs: $(STAMP)
	$(BIN)/python -m forethought.report

bench-myopia: $(STAMP)
	$(BIN)/forethought experiment run myopia_synthetic
	$(BIN)/forethought experiment run myopia_step_cost
	$(BIN)/forethought experiment run myopia_lm

clean:
	rm -rf $(VENV) runs .pytest_cache
