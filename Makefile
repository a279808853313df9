# The two commands of the README. Each sets up its own virtualenv on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-compat lint bench fuzz docs system-deps clean

$(STAMP): pyproject.toml
	@# A venv from before the move to `prefect` has prefect-client too, whose files replaced
	@# prefect's (the same package): start it again.
	@if [ -x $(BIN)/pip ] && $(BIN)/pip show prefect-client >/dev/null 2>&1; then \
	  echo "$(VENV) has prefect-client (it overwrites prefect's files): building it again"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# What the tests need from the system (sshd, tcsh, zsh, gcc, fuse, BusyBox, PostgreSQL's
# server binaries): .ci/system-packages says which and why. Installed only when missing and
# only as root; otherwise the missing ones are named (the tests that need them are skipped).
system-deps:
	@.ci/system-packages

# The newest Prefect the range allows (what `pip install -e '.[dev]'` resolves to). Most of the
# suite waits on real time (real jobs, intervals, settle gaps), not on the CPU: 4 pytest-xdist
# workers overlap those waits, also on 2 cores (the parallel part took 15.5 min with 4 workers
# where 2 took 27, using 1.4 of the 2 cores; 6 took 14.7, using 1.7, with 6 load failures:
# the CPU, not the waits, bounds it from there). Each test module runs whole on one worker
# (--dist loadfile: its module fixtures start once, its tests never overlap each other; the
# modules that share a Prefect server or test harness run on one, and the slowest units are
# handed out first: tests/conftest.py); the tests marked `alone` (they disturb whatever else
# runs on the machine) run after, by themselves. TEST_WORKERS=0: no workers; 2 where the
# machine is busy with other work (a real-time test fails more often under load than its own).
# A test of real time can still miss its bound beside 3 others on 2 cores (CI saw 3 of ~2,950
# in one run): the parallel part's failures, if at most AGAIN_AT_MOST, run again one after
# another with nothing beside them, and make test passes only if each passes there. Both
# lists are printed; more failures than that, or any error of pytest's own, fail at once.
TEST_WORKERS ?= 4
AGAIN_AT_MOST ?= 5
# --durations: the 30 slowest tests, printed at the end of every run (CI's included), are where
# the suite's time goes: what _SLOW_FIRST (tests/conftest.py) and any work on its length start from.
PYTEST_PARALLEL := pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not alone" --durations=30
PYTEST_ALONE := pytest -q -m alone
LASTFAILED := .pytest_cache/v/cache/lastfailed
test: $(STAMP) system-deps
	@rm -f $(LASTFAILED)
	@$(BIN)/$(PYTEST_PARALLEL); rc=$$?; [ $$rc -eq 0 ] && exit 0; [ $$rc -eq 1 ] || exit $$rc; \
	n=$$($(BIN)/python -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' $(LASTFAILED)) || exit 1; \
	[ "$$n" -le $(AGAIN_AT_MOST) ] || { echo "make test: $$n failed (more than $(AGAIN_AT_MOST)): not run again"; exit 1; }; \
	echo "make test: $$n failed beside $(TEST_WORKERS) workers; each again, alone:"; \
	$(BIN)/pytest -q --last-failed --last-failed-no-failures none -m "not alone"
	$(BIN)/$(PYTEST_ALONE)

# Both ends of the Prefect range pyproject.toml allows, each in its own virtualenv, the whole
# suite (the wheel's install tests included: into an environment that has that Prefect, no
# file of it may change). The oldest: every package pinned as a user of the floor had it
# (constraints/oldest.txt). The newest: resolved again at every run. Not in CI (minutes).
OLDEST := .venv-oldest
NEWEST := .venv-newest
$(OLDEST)/.installed: pyproject.toml constraints/oldest.txt
	rm -rf $(OLDEST)
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/pip install -q --upgrade pip
	$(OLDEST)/bin/pip install -q -e '.[dev]' -c constraints/oldest.txt
	touch $@

test-compat: $(OLDEST)/.installed system-deps
	$(OLDEST)/bin/$(PYTEST_PARALLEL)
	$(OLDEST)/bin/$(PYTEST_ALONE)
	[ -x $(NEWEST)/bin/pip ] || $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/pip install -q --upgrade pip
	$(NEWEST)/bin/pip install -q --upgrade --upgrade-strategy eager -e '.[dev]'
	$(NEWEST)/bin/pip list 2>/dev/null | grep -i '^prefect '
	$(NEWEST)/bin/$(PYTEST_PARALLEL)
	$(NEWEST)/bin/$(PYTEST_ALONE)

demo: $(STAMP)
	$(BIN)/crosscheck demo

lint: $(STAMP)
	$(BIN)/ruff check sensors prefect_crosscheck flows tests bench
	$(BIN)/ruff format --check sensors prefect_crosscheck flows tests bench
	$(BIN)/mypy

bench: $(STAMP) system-deps
	$(BIN)/python bench/local_probe.py
	$(BIN)/python bench/ssh_cycle.py
	$(BIN)/python bench/regex.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/span.py

# The ground-truth fuzzer's long run (issue 21): histories of one stage against real jobs,
# files and watches; no complete the truth does not allow, no false failed, and (FUZZ_MUST_SHARE,
# 99 %) watches that must complete do so within 3 checks. `make test` runs 64 seeds of it.
# FUZZ_HISTORIES / FUZZ_WORKERS / FUZZ_FIRST_SEED size it; one seed: python -m tests.fuzz --seed N.
FUZZ_HISTORIES ?= 10000
FUZZ_WORKERS   ?= 4
FUZZ_FIRST_SEED ?= 0
FUZZ_MUST_SHARE ?= 99
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --histories $(FUZZ_HISTORIES) --workers $(FUZZ_WORKERS) --first-seed $(FUZZ_FIRST_SEED) --must-share $(FUZZ_MUST_SHARE)

# The documentation site (docs/, mkdocs.yml) built into site/, in a virtualenv of its own;
# --strict: a broken link or anchor, or a warning of mkdocstrings, fails the build.
DOCS_VENV := .venv-docs
$(DOCS_VENV)/.installed:
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q --upgrade pip
	$(DOCS_VENV)/bin/pip install -q mkdocs-material mkdocstrings-python
	touch $@

docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(OLDEST) $(NEWEST) $(DOCS_VENV) site .venv-compat .pytest_cache .ruff_cache *.egg-info
