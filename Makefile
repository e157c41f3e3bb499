# Two commands after a clone: `make demo` and `make test`. Each builds the
# virtual environment on first use (python3 + PyPI only, nothing global).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck imports unit venv clean bench

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuscale demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

# The README's test command: every habit check, then the whole suite.
test: lint typecheck imports unit

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
