# `make demo` and `make test` each build .venv from nothing on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
SEED   := ../shared/data/seed/h100_7b_seed.csv

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

demo: $(STAMP)
	@echo "== The founding question from first principles: a 7B model in bf16 on an H100, ~300-token context =="
	$(BIN)/tokenroof roofline --model llama-2-7b --hardware h100-sxm --context 300 --batch 1 8 32 128 256 512

bench: $(STAMP)
	$(BIN)/python benchmarks/sweep_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
