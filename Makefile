# gapless — two commands on a fresh machine: `make demo` and `make test`.
# Every target installs what it needs; a second run reuses what the first fetched.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration lint bench up down status clean image image-test

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

# The one container image (podman, buildah, mmdebstrap … from Debian's packages when
# missing; the base is built once and reused; podman's configuration under .local/).
image: $(STAMP)
	$(BIN)/gapless image build

# The demo through the image's containers; `make test` runs it with the rest.
image-test: $(STAMP)
	$(BIN)/gapless up
	$(BIN)/pytest -q tests/e2e/test_image.py

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
