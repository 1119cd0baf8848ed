# Full self-play rounds over a run directory: (serve) → inject → validate → pool select → solve → reward →
# higher-order → pool close → (train) → next round, then `ssrkit report`. See recipes/README.md.
#
#   make -f recipes/selfplay.mk REPOS="build/repos/textkit build/repos/ledger"           # offline, no model
#   make -f recipes/selfplay.mk REPOS=$HOME/src/mylib MODE=model BASE_URL=http://localhost:8000/v1 MODEL=policy
#   make -f recipes/selfplay.mk help                                                    # variables, targets
#
# Every step of every round leaves a stamp (RUN/round-NNN/.done/STEP) once its command succeeded, so a
# re-run skips finished steps, and the commands themselves skip finished work inside a step (existing
# artifacts, finished attempts, up-to-date validations): an interrupted round is finished by running make
# again. `make -j` runs the per-repository steps in parallel.

SELFPLAY_MK := $(lastword $(MAKEFILE_LIST))
RECIPES_DIR := $(patsubst %/,%,$(dir $(SELFPLAY_MK)))
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
.SUFFIXES:
.DEFAULT_GOAL := all
MAKEFLAGS += --no-print-directory

# -- the run ------------------------------------------------------------------------------------------
MODE ?= offline#               offline (procedural injector, repair solver) | model (LLM agents)
RUN ?= runs/selfplay#           the run directory
REPOS ?=#                       repository paths (local git working trees), space-separated
ROUNDS ?= 2#                    rounds to run (raising it later continues the run)
N ?= 6#                         injections per repository per round
STRATEGIES ?=#                  procedural: expression,removal,history,combine; llm: removal=0.5,history=0.5
JOBS ?= 2#                      parallel sandboxes inside each command (--jobs)
EXECUTOR ?=#                    ray: inject, validate, solve and higher-order run on a Ray cluster (docs/cluster.md)
RAY_ADDRESS ?=#                 the Ray cluster to join (default: the environment's RAY_ADDRESS, else a one-node Ray here)
SEED ?= 0#                      round k injects with seed SEED*1000+k
ALPHA ?= 0.8#                   α of the injector reward
OLD_RATIO ?= 0.5#               share of a round's tasks carried from the pool
RETIRE_AFTER ?= 2#              retire pool tasks always/never solved in this many rounds
TIMEOUT ?=#                     seconds per test run (ssrkit's default: 90)
MIN_PASSING_TESTS ?=#           validation thresholds (ssrkit's defaults: 5, 1, 1)
MIN_FAILING_TESTS ?=
MIN_CHANGED_FILES ?=
CONFIG ?=#                      your own ssrkit.toml, merged into RUN/ssrkit.toml

ifeq ($(MODE),offline)
INJECTOR ?= procedural
SOLVER ?= repair
ATTEMPTS ?= 3
else ifeq ($(MODE),model)
INJECTOR ?= llm
SOLVER ?= llm
ATTEMPTS ?= 8
else
$(error MODE must be offline or model, not '$(MODE)')
endif
BUDGET_RUNS ?= 6#               test runs the repair solver may spend per attempt
PARTIAL ?= yes#                 repair submits its best partial fix when it finds none (feeds higher-order)
HIGHER_MAX ?= $(N)#             higher-order artifacts per repository per round (0: none)

# -- the model (MODE=model, or INJECTOR=llm / SOLVER=llm) ---------------------------------------------
SERVE ?= no#                    yes: start `ssrkit serve --detach` on POLICY (then each new checkpoint)
POLICY ?=#                      the initial policy checkpoint (served with SERVE=yes, trained with TRAIN)
SERVE_PORT ?= 8000
SERVED_MODEL ?= policy
SERVE_COMMAND ?= vllm serve
SERVE_ARGS ?=#                  extra server flags, e.g. --max-model-len 32768
SERVE_ENV ?=#                   KEY=VALUE ... for the server's environment (e.g. VLLM_CPU_KVCACHE_SPACE=2)
SERVE_STRATEGY ?= restart#       how a new checkpoint reaches the server: restart, lora (train adapters) or nccl
SERVE_TIMEOUT ?= 900
ifeq ($(SERVE),yes)
BASE_URL ?= http://127.0.0.1:$(SERVE_PORT)/v1
MODEL ?= $(SERVED_MODEL)
endif
BASE_URL ?=#                     the model server(s): one URL, or several comma-separated (trajectories spread over them)
MODEL ?=
INJECT_BASE_URL ?= $(BASE_URL)
INJECT_MODEL ?= $(MODEL)
SOLVE_BASE_URL ?= $(BASE_URL)
SOLVE_MODEL ?= $(MODEL)
API_KEY_ENV ?=#                 variable holding the API key (default OPENAI_API_KEY); never written anywhere
TEMPERATURE ?=
MAX_TURNS ?=
TOKEN_IDS ?= yes#                ask for token ids and log-probs (vLLM returns them; no: never ask)
MAX_TOKENS ?=#                  tokens per model reply (default 4096)
TRAIN ?= auto#                  auto: train between rounds when POLICY is set and torch is importable
TRAIN_LAUNCH ?= $(SSRKIT) train#  e.g. accelerate launch --config_file recipes/accelerate/ddp.yaml -m ssrkit train
TRAIN_ARGS ?=
# continuous self-play (`make -f recipes/selfplay.mk continuous`, issue 28): producers run rounds again and again
# against the served policy while `ssrkit train --follow RUN` trains on their groups and refreshes the server
CONTINUOUS ?= no#               yes inside `continuous`: rounds do not train or move the server; agents follow it
DURATION ?= 0#                  continuous: seconds until RUN/STOP is touched (0: until `make ... continuous-stop`)
MAX_ROUNDS ?= 0#                continuous: stop after this many rounds (0: no limit)
CHUNK ?= 2#                     continuous: rounds per make invocation
FOLLOW_ARGS ?=#                 continuous: extra `ssrkit train --follow` flags, e.g. --max-staleness 4 --groups-per-step 4
SERVER_WAIT ?= 1800#            continuous: seconds an agent's turn waits for a server restarting for a refresh
LORA_KEEP ?= 2#                 continuous, SERVE_STRATEGY=lora: adapters kept loaded (requests on the previous finish)

# -- tools --------------------------------------------------------------------------------------------
SSRKIT ?= ssrkit
VENV_BIN ?=#                    prepended to PATH: the tests run with that virtualenv's python
PYTHON ?= $(if $(VENV_BIN),$(abspath $(VENV_BIN))/python,python3)#  the run's Python (the torch probe of TRAIN=auto)
VERBOSE ?= no#                  no: each command's tables go to RUN/round-NNN/logs/STEP.log (errors and progress stay)
INJECT_ARGS ?=#                 extra flags for each command
VALIDATE_ARGS ?=
SOLVE_ARGS ?=
HIGHER_ARGS ?=

ifneq ($(VENV_BIN),)
export PATH := $(abspath $(VENV_BIN)):$(PATH)
endif
ifneq ($(filter-out help status report stop-server continuous-stop,$(or $(MAKECMDGOALS),all)),)
ifeq ($(strip $(REPOS)),)
$(error set REPOS to the repositories to play on, e.g. REPOS="build/repos/textkit build/repos/ledger" (variables: make -f $(SELFPLAY_MK) help))
endif
endif
HELPER := $(PYTHON) $(RECIPES_DIR)/selfplay_helper.py
empty :=
space := $(empty) $(empty)
comma := ,
CFG := $(RUN)/ssrkit.toml
REPO_PATHS := $(abspath $(REPOS))
REPO_NAMES := $(notdir $(REPO_PATHS))
ifneq ($(words $(REPO_NAMES)),$(words $(sort $(REPO_NAMES))))
$(error REPOS has two repositories with the same directory name ($(REPO_NAMES)); rename or symlink one)
endif
ROUND_NUMS := $(shell seq 1 $(ROUNDS))
pad = $(shell printf '%03d' $(1))
ROUND_IDS := $(foreach n,$(ROUND_NUMS),$(call pad,$(n)))
LAST_END := $(RUN)/round-$(lastword $(ROUND_IDS))/.done/end

ifeq ($(TRAIN),auto)
DO_TRAIN := $(if $(and $(POLICY),$(filter llm,$(INJECTOR) $(SOLVER))),$(shell $(PYTHON) -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null && echo yes))
else ifeq ($(TRAIN),yes)
DO_TRAIN := yes
else ifeq ($(TRAIN),no)
DO_TRAIN :=
else
$(error TRAIN must be auto, yes or no, not '$(TRAIN)')
endif
ifeq ($(CONTINUOUS),yes)
DO_TRAIN :=# the follower trains
endif

# -- command lines ------------------------------------------------------------------------------------
# (expanded when a step runs, so a missing endpoint is reported by the step that needs it)
need = $(if $($(1)),,$(error $(1) is empty: $(2)))
EXEC_FLAGS = $(if $(EXECUTOR),--executor $(EXECUTOR)) $(if $(RAY_ADDRESS),--ray-address $(RAY_ADDRESS))
MODEL_FLAGS = $(if $(API_KEY_ENV),--api-key-env $(API_KEY_ENV)) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
  $(if $(MAX_TURNS),--max-turns $(MAX_TURNS)) $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS)) \
  $(if $(filter no,$(TOKEN_IDS)),--no-token-ids)
INJECT_FLAGS = --n $(N) --jobs $(JOBS) $(if $(STRATEGIES),--strategy $(STRATEGIES)) $(EXEC_FLAGS) \
  $(if $(filter llm,$(INJECTOR)),$(call need,INJECT_BASE_URL,set BASE_URL (or INJECT_BASE_URL) or SERVE=yes)$(call need,INJECT_MODEL,set MODEL (or INJECT_MODEL)) \
    --agent llm --base-url $(INJECT_BASE_URL) --model $(call served,$(INJECT_MODEL)) $(MODEL_FLAGS),--agent $(INJECTOR)) $(INJECT_ARGS)
SOLVE_FLAGS = --solver $(SOLVER) --attempts $(ATTEMPTS) --jobs $(JOBS) $(EXEC_FLAGS) \
  $(if $(filter repair,$(SOLVER)),--budget-runs $(BUDGET_RUNS) $(if $(filter yes,$(PARTIAL)),--partial)) \
  $(if $(filter llm,$(SOLVER)),$(call need,SOLVE_BASE_URL,set BASE_URL (or SOLVE_BASE_URL) or SERVE=yes)$(call need,SOLVE_MODEL,set MODEL (or SOLVE_MODEL)) \
    --base-url $(SOLVE_BASE_URL) --model $(call served,$(SOLVE_MODEL)) $(MODEL_FLAGS)) $(SOLVE_ARGS)
# $(call served,MODEL): MODEL, or with SERVE=yes the name the recipe's server serves now (a LoRA adapter's)
served = $(if $(and $(filter yes,$(SERVE)),$(filter $(SERVED_MODEL),$(1))),"$$($(HELPER) model --run $(RUN) --default '$(1)')",$(1))
# $(call log,ROUND,STEP): where a step's standard output goes
log = $(if $(filter yes,$(VERBOSE)),,> $(RUN)/round-$(1)/logs/$(2).log)
# the policy of round $(1) (the newest finished checkpoint of an earlier round, else POLICY)
policy = $$($(HELPER) policy $(RUN) $(1) '$(POLICY)')
# $(call serve,ROUND,ROLE): with SERVE=yes, make sure the server runs the round's policy (ROLE uses the model)
serve = $(if $(and $(filter yes,$(SERVE)),$(filter llm,$(2))),$(call need,POLICY,SERVE=yes serves POLICY=CHECKPOINT_DIR)\
  $(HELPER) server ensure --run $(RUN) --checkpoint "$(call policy,$(1))" --port $(SERVE_PORT) --name $(SERVED_MODEL) \
    --command '$(SERVE_COMMAND)' --vllm-args '$(SERVE_ARGS)' --env '$(SERVE_ENV)' --timeout $(SERVE_TIMEOUT) \
    --ssrkit '$(SSRKIT)' --strategy $(SERVE_STRATEGY))
ifeq ($(CONTINUOUS),yes)
# the follower moves the server; agents send the base name and follow its newest version ([agent] follow_policy)
serve =
served = $(1)
endif

# -- targets ------------------------------------------------------------------------------------------
.PHONY: all rounds report config status stop-server help check-repos continuous continuous-stop $(addprefix round-,$(ROUND_NUMS))

all: $(RUN)/report.json
	$(SSRKIT) report $(RUN) --no-plots
	@echo "plots: $(RUN)/plots/   metrics: $(RUN)/metrics.csv   report: $(RUN)/report.json"
ifeq ($(SERVE),yes)
	$(HELPER) server stop --run $(RUN) --ssrkit '$(SSRKIT)'
endif

rounds: $(LAST_END)

$(RUN)/report.json: $(LAST_END)
	$(SSRKIT) report $(RUN) --json > $@.tmp
	mv $@.tmp $@

report:
	$(SSRKIT) report $(RUN)

check-repos:
	@test -n "$(REPOS)" || { echo "error: set REPOS to the repositories to play on, e.g. REPOS=\"build/repos/textkit build/repos/ledger\"" >&2; exit 2; }
	@for r in $(REPO_PATHS); do test -d "$$r" || { echo "error: REPOS: $$r is not a directory" >&2; exit 2; }; done

config: check-repos
	@$(HELPER) config $(CFG) --base '$(CONFIG)' \
	  --set run.mode=$(MODE) --set run.repos='[$(subst $(space),$(comma) ,$(foreach p,$(REPO_PATHS),"$(p)"))]' --set run.rounds=$(ROUNDS) \
	  --set run.n=$(N) --set run.injector=$(INJECTOR) --set run.strategies='$(STRATEGIES)' --set run.solver=$(SOLVER) \
	  --set run.attempts=$(ATTEMPTS) --set run.jobs=$(JOBS) --set run.seed=$(SEED) --set run.old_ratio=$(OLD_RATIO) \
	  --set run.retire_after=$(RETIRE_AFTER) --set run.higher_max=$(HIGHER_MAX) \
	  --set run.budget_runs=$(if $(filter repair,$(SOLVER)),$(BUDGET_RUNS)) \
	  --set run.partial=$(if $(filter repair,$(SOLVER)),$(PARTIAL)) \
	  --set run.inject_base_url='$(if $(filter llm,$(INJECTOR)),$(INJECT_BASE_URL))' \
	  --set run.inject_model='$(if $(filter llm,$(INJECTOR)),$(INJECT_MODEL))' \
	  --set run.solve_base_url='$(if $(filter llm,$(SOLVER)),$(SOLVE_BASE_URL))' \
	  --set run.solve_model='$(if $(filter llm,$(SOLVER)),$(SOLVE_MODEL))' \
	  --set run.serve=$(SERVE) --set run.policy='$(POLICY)' --set run.train=$(if $(DO_TRAIN),yes,no) \
	  --set validate.timeout=$(TIMEOUT) --set validate.min_passing_tests=$(MIN_PASSING_TESTS) \
	  --set validate.min_failing_tests=$(MIN_FAILING_TESTS) --set validate.min_changed_files=$(MIN_CHANGED_FILES) \
	  --set validate.jobs=$(JOBS) --set solve.jobs=$(JOBS) --set solve.hide='["$(abspath $(RUN))"]' \
	  --set reward.alpha=$(ALPHA) --set agent.max_turns=$(MAX_TURNS)$(if $(filter yes,$(CONTINUOUS)), --set agent.follow_policy=true --set agent.server_wait=$(SERVER_WAIT))

status:
	@$(HELPER) status $(RUN) $(ROUNDS) $(REPO_NAMES)

stop-server:
	$(HELPER) server stop --run $(RUN) --ssrkit '$(SSRKIT)'

# one command: the trainer follows RUN, the server serves its newest step, producers play rounds until stopped
continuous: check-repos
	$(call need,POLICY,continuous self-play trains POLICY=CHECKPOINT_DIR)
	$(HELPER) continuous --run $(RUN) --mode $(MODE) --make '$(MAKE) -f $(SELFPLAY_MK)' --chunk $(CHUNK) \
	  --duration $(DURATION) --max-rounds $(MAX_ROUNDS) --train-launch '$(TRAIN_LAUNCH)' --policy '$(POLICY)' \
	  --follow-args '$(if $(filter lora,$(SERVE_STRATEGY)),--lora) $(FOLLOW_ARGS)' --ssrkit '$(SSRKIT)' \
	  $(if $(filter yes,$(SERVE)),--serve '--port $(SERVE_PORT) --name $(SERVED_MODEL) --command "$(SERVE_COMMAND)" \
	    --vllm-args "$(SERVE_ARGS)" --env "$(SERVE_ENV)" --timeout $(SERVE_TIMEOUT) --strategy $(SERVE_STRATEGY) \
	    --lora-keep $(LORA_KEEP)')

continuous-stop:
	@test -d $(RUN) || { echo "$(RUN): no such run directory (RUN= the run that \`continuous\` plays)" >&2; exit 2; }
	touch $(RUN)/STOP
	@echo "$(RUN)/STOP: the round in flight finishes and no new one starts; the trainer stops at a step boundary, then the server"

# -- one round ----------------------------------------------------------------------------------------
# $(1) round id (001), $(2) the previous round's id (empty for the first), $(3) the round number (1)
define ROUND
round-$(3): $(RUN)/round-$(1)/.done/end

$(RUN)/round-$(1)/.done/start: $(if $(2),$(RUN)/round-$(2)/.done/end) | config
	$(if $(filter yes,$(CONTINUOUS)),@test ! -e $(RUN)/STOP || { echo "$(RUN)/STOP exists: no new round"; exit 3; })
	@mkdir -p $$(@D) $(RUN)/round-$(1)/logs
	cp $(CFG) $(RUN)/round-$(1)/ssrkit.toml
	@touch $$@

$(RUN)/round-$(1)/.done/select: $(RUN)/round-$(1)/.done/start $(foreach r,$(REPO_NAMES),$(RUN)/round-$(1)/.done/validate-$(r))
	$(SSRKIT) pool select $(RUN) --round $(3) --old-ratio $(OLD_RATIO) --seed $(SEED)
	@touch $$@

$(RUN)/round-$(1)/.done/close: $(RUN)/round-$(1)/.done/select $(foreach r,$(REPO_NAMES),$(RUN)/round-$(1)/.done/higher-$(r))
	$(SSRKIT) pool close $(RUN) --round $(3) --retire-after $(RETIRE_AFTER)
	@touch $$@

$(RUN)/round-$(1)/.done/train: $(RUN)/round-$(1)/.done/close
ifneq ($(DO_TRAIN),)
	$$(call need,POLICY,training needs POLICY=CHECKPOINT_DIR (the initial policy))
	dirs=$$$$($(HELPER) dirs $(RUN)/round-$(1)/inject $(RUN)/round-$(1)/tasks); \
	if [ -n "$$$$dirs" ]; then \
	  $(TRAIN_LAUNCH) $$$$dirs --model "$$(call policy,$(3))" --out $(RUN)/round-$(1)/policy --config $(RUN)/round-$(1)/ssrkit.toml \
	    --resume --allow-empty $(if $(filter lora,$(SERVE_STRATEGY)),--lora) $(TRAIN_ARGS); \
	fi
ifneq ($(SERVE),yes)
	@echo "note: SERVE=no: the next round still talks to $(BASE_URL); the new policy is in $(RUN)/round-$(1)/policy"
endif
endif
	@touch $$@

$(RUN)/round-$(1)/.done/end: $(RUN)/round-$(1)/.done/train
	@touch $$@
endef

# $(1) round id, $(2) repository name, $(3) repository path, $(4) injection seed, $(5) the earlier rounds' ids
define REPO_STEPS
$(RUN)/round-$(1)/.done/inject-$(2): $(RUN)/round-$(1)/.done/start
	$$(call serve,$(1),$(INJECTOR))
	$(SSRKIT) inject $(3) --out $(RUN)/round-$(1)/inject/$(2) --seed $(4) --config $(RUN)/round-$(1)/ssrkit.toml \
	  $$(INJECT_FLAGS) $$(call log,$(1),inject-$(2)) || test $$$$? -eq 1
	@touch $$@

$(RUN)/round-$(1)/.done/validate-$(2): $(RUN)/round-$(1)/.done/inject-$(2)
	dirs=$$$$($(HELPER) dirs $(RUN)/round-$(1)/inject/$(2)); \
	if [ -n "$$$$dirs" ]; then \
	  $(SSRKIT) validate $$$$dirs --jobs $(JOBS) $(EXEC_FLAGS) --config $(RUN)/round-$(1)/ssrkit.toml $(VALIDATE_ARGS) \
	    $$(call log,$(1),validate-$(2)) || test $$$$? -eq 1; \
	else echo "$(2): no artifacts in round $(1)"; fi
	@touch $$@

$(RUN)/round-$(1)/.done/solve-$(2): $(RUN)/round-$(1)/.done/select
	$$(call serve,$(1),$(SOLVER))
	dirs=$$$$($(HELPER) dirs $(RUN)/round-$(1)/inject/$(2) $(RUN)/round-$(1)/tasks/$(2)); \
	if [ -n "$$$$dirs" ]; then \
	  $(SSRKIT) solve $$$$dirs --config $(RUN)/round-$(1)/ssrkit.toml $$(SOLVE_FLAGS) $$(call log,$(1),solve-$(2)); \
	fi
	@touch $$@

$(RUN)/round-$(1)/.done/reward-$(2): $(RUN)/round-$(1)/.done/solve-$(2)
	dirs=$$$$($(HELPER) dirs $(RUN)/round-$(1)/inject/$(2) $(RUN)/round-$(1)/tasks/$(2)); \
	if [ -n "$$$$dirs" ]; then $(SSRKIT) reward $$$$dirs --alpha $(ALPHA) $$(call log,$(1),reward-$(2)); fi
	@touch $$@

$(RUN)/round-$(1)/.done/higher-$(2): $(RUN)/round-$(1)/.done/reward-$(2)
	dirs=$$$$($(HELPER) dirs $(RUN)/round-$(1)/inject/$(2) $(RUN)/round-$(1)/tasks/$(2)); \
	known=$$$$($(HELPER) dirs --as-option=--known $(foreach j,$(5),$(RUN)/round-$(j)/higher/$(2))); \
	if [ -n "$$$$dirs" ] && [ "$(HIGHER_MAX)" != 0 ]; then \
	  $(SSRKIT) higher-order $$$$dirs --out $(RUN)/round-$(1)/higher/$(2) $$$$known --max $(HIGHER_MAX) --jobs $(JOBS) \
	    $(EXEC_FLAGS) --config $(RUN)/round-$(1)/ssrkit.toml $(HIGHER_ARGS) $$(call log,$(1),higher-$(2)); \
	fi
	@touch $$@
endef

$(foreach n,$(ROUND_NUMS),$(eval $(call ROUND,$(call pad,$(n)),$(if $(filter 1,$(n)),,$(call pad,$(shell expr $(n) - 1))),$(n))))
$(foreach n,$(ROUND_NUMS),$(foreach p,$(REPO_PATHS),$(eval $(call REPO_STEPS,$(call pad,$(n)),$(notdir $(p)),$(p),$(shell expr $(SEED) \* 1000 + $(n)),$(wordlist 1,$(shell expr $(n) - 1),$(ROUND_IDS))))))

help:
	@echo "recipes/selfplay.mk — full self-play rounds (see recipes/README.md)"
	@echo
	@echo "targets:  all (default: every round, then the report)  rounds  round-K  report  status  config  stop-server"
	@echo "          continuous (producers + train --follow until DURATION or continuous-stop)  continuous-stop"
	@echo
	@echo "variables (current values):"
	@$(foreach v,MODE RUN REPOS ROUNDS N STRATEGIES INJECTOR SOLVER ATTEMPTS JOBS EXECUTOR RAY_ADDRESS SEED ALPHA OLD_RATIO \
	  RETIRE_AFTER HIGHER_MAX BUDGET_RUNS PARTIAL TIMEOUT MIN_PASSING_TESTS MIN_FAILING_TESTS MIN_CHANGED_FILES CONFIG BASE_URL MODEL \
	  INJECT_BASE_URL INJECT_MODEL SOLVE_BASE_URL SOLVE_MODEL API_KEY_ENV TEMPERATURE MAX_TURNS MAX_TOKENS TOKEN_IDS SERVE POLICY \
	  SERVE_PORT SERVED_MODEL SERVE_COMMAND SERVE_ARGS SERVE_ENV SERVE_STRATEGY SERVE_TIMEOUT TRAIN TRAIN_LAUNCH TRAIN_ARGS \
	  INJECT_ARGS VALIDATE_ARGS SOLVE_ARGS HIGHER_ARGS SSRKIT PYTHON VENV_BIN VERBOSE \
	  CONTINUOUS DURATION MAX_ROUNDS CHUNK FOLLOW_ARGS SERVER_WAIT LORA_KEEP,\
	  printf '  %-18s %s\n' '$(v)' '$($(v))';)
	@echo "  (training between rounds: $(if $(DO_TRAIN),on,off))"
