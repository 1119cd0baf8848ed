# ssrkit — the two commands that matter:
#   make selfplay   set up a virtualenv and run the main job on the embedded defaults (no model, no Docker)
#   make test       set up a virtualenv and run the test suite
#
# Everything else lives in recipes/ (full self-play rounds, model mode, training).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
BUILD ?= build
PYTEST_ARGS ?=

.PHONY: all selfplay test venv venv-train examples clean help

all: help

help:
	@echo "make selfplay  - one offline self-play round on examples/repos (procedural injector, repair solver)"
	@echo "make test      - run the test suite"
	@echo "make examples  - materialize the example repositories into $(BUILD)/repos"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,report]'
	touch $@

$(VENV)/.installed-train: $(VENV)/.installed
	$(BIN)/pip install -q '$(TORCH_SPEC)'
	$(BIN)/pip install -q -e '.[train,dev,report]'
	touch $@

venv: $(VENV)/.installed
venv-train: $(VENV)/.installed-train

examples: venv
	$(BIN)/ssrkit examples materialize --dest $(BUILD)/repos

test: venv-train
	$(BIN)/python -m pytest $(PYTEST_ARGS)

selfplay: venv examples
	$(BIN)/ssrkit validate examples/artifacts/textkit --repo $(BUILD)/repos/textkit --jobs 2 || true
	$(BIN)/ssrkit validate examples/artifacts/ledger --repo $(BUILD)/repos/ledger --jobs 2 || true

clean:
	rm -rf $(VENV) $(BUILD) .pytest_cache
