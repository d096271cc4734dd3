# gapless — two commands on a fresh machine: `make demo` and `make test`.
# Every target installs what it needs; a second run reuses what the first fetched.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration lint bench up down status clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gapless demo

test: $(STAMP)
	$(BIN)/gapless up
	$(BIN)/pytest -q

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check schemas db producers processors infra tests
	$(BIN)/ruff format --check schemas db producers processors infra tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/gapless bench

up: $(STAMP)
	$(BIN)/gapless up

down: $(STAMP)
	$(BIN)/gapless down

status: $(STAMP)
	$(BIN)/gapless status

clean: down
	rm -rf .local
