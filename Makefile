# Two commands a user needs: `make demo` and `make test`. Both create .venv when missing.
# torch is installed first and only as torch==2.13.0 (a local CPU wheel on our machines);
# installing anything that pulls a bare `torch` before it would download CUDA builds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[torch,rich,yaml,plot,tensorboard,dev,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check aspecthook tests examples bench
	$(BIN)/ruff format --check aspecthook tests examples bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict aspecthook tests/typing examples

test: lint typecheck
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/calls.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
