# The two commands of the README. Each sets up its own virtualenv on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-compat lint bench system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# What the tests need from the system: OpenSSH's sshd (a real server on 127.0.0.1), a
# login shell that is not sh, and PostgreSQL's server binaries (the store tests start their
# own cluster; the package's default one is never used). Installed only when missing and
# only as root.
system-deps:
	@missing=""; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v tcsh >/dev/null 2>&1 || missing="$$missing tcsh"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: missing$$missing (tests that need them are skipped)"; fi; \
	fi

# The newest Prefect the range allows (what `pip install -e '.[dev]'` resolves to).
test: $(STAMP) system-deps
	$(BIN)/pytest -q

# The oldest Prefect supported (constraints/oldest.txt), in its own virtualenv. Not in CI.
COMPAT := .venv-compat
$(COMPAT)/.installed: pyproject.toml constraints/oldest.txt
	$(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/pip install -q --upgrade pip
	$(COMPAT)/bin/pip install -q -e '.[dev]' -c constraints/oldest.txt
	touch $@

test-compat: $(COMPAT)/.installed system-deps
	$(COMPAT)/bin/pytest -q

demo: $(STAMP)
	$(BIN)/crosscheck demo

lint: $(STAMP)
	$(BIN)/ruff check sensors flows tests bench
	$(BIN)/ruff format --check sensors flows tests bench

bench: $(STAMP) system-deps
	$(BIN)/python bench/local_probe.py
	$(BIN)/python bench/ssh_cycle.py
	$(BIN)/python bench/regex.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/fleet.py

clean:
	rm -rf $(VENV) $(COMPAT) .pytest_cache .ruff_cache *.egg-info
