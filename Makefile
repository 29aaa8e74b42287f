# SubZero on Spark. `make demo`, `make test` and `make docs` set everything up on a fresh machine
# (Python 3.11+, Java 17+): a virtualenv in .venv with the package and its dependencies.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JAVA   := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)
HOME_DIR ?= subzero-home

.PHONY: demo test bench docs check-java browser servers install bytecode clean

check-java:
	@v=$$($(JAVA) -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$v" ]; then \
	  echo "error: Java 17+ is required to run Spark, and 'java' was not found." >&2; \
	  echo "       Debian: sudo apt-get install openjdk-17-jre-headless (or set JAVA_HOME)" >&2; \
	  exit 1; \
	fi; \
	if [ "$$v" -lt 17 ]; then \
	  echo "error: Java 17+ is required to run Spark; found Java $$v ($(JAVA))." >&2; \
	  echo "       Debian: sudo apt-get install openjdk-17-jre-headless, then set JAVA_HOME" >&2; \
	  exit 1; \
	fi

# The editable install runs with -qq: pip (25+) forwards the build backend's warnings, and
# setuptools warns on every editable install (a '!!' block about folders named like the
# package) that a newcomer cannot act on; pip's errors still show.
$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "error: '$(PYTHON) -m venv' failed; on Debian: sudo apt-get install python3-venv" >&2; \
	  rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[remote,test,docs]'
	@touch $(STAMP)

install: $(STAMP)

# The project's own bytecode, as pip writes it for an installed package: with
# PYTHONDONTWRITEBYTECODE set (some shells and CI images set it), every process -- each run,
# each Spark worker -- would compile the project's modules anew (0.1-0.2 s a process).
# Quick when nothing changed.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q subzero operators encoders optimizer workflows benchmarks >/dev/null

# The explorer's tests drive a real headless browser: Debian's chromium and its driver,
# installed when missing (as root, or through sudo); without them those tests say why they
# are skipped.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing Debian's chromium and chromium-driver (for the explorer's browser tests)"; \
	  { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install \
	      -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "warning: could not install chromium; the browser tests will be skipped" >&2; \
	else echo "warning: no apt-get; the browser tests will be skipped" >&2; fi

# The remote-home tests run a real PostgreSQL (Debian's postgresql: initdb and postgres,
# started by the tests on 127.0.0.1 in a temporary folder, stopped by PID); installed when
# missing, as for the browser. The S3 API server (moto's) comes from PyPI with the tests.
servers:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing Debian's postgresql (for the PostgreSQL catalog's tests)"; \
	  { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install \
	      -y -qq postgresql >/dev/null; } || \
	  echo "warning: could not install postgresql; the PostgreSQL tests will be skipped" >&2; \
	else echo "warning: no apt-get; the PostgreSQL tests will be skipped" >&2; fi

demo: check-java $(STAMP) bytecode
	$(BIN)/python -m subzero.cli.demo --home $(HOME_DIR)

test: check-java $(STAMP) bytecode browser servers
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

bench: check-java $(STAMP) bytecode
	$(BIN)/python benchmarks/bench_executor.py --quick

# The documentation site, in docs/_build/html: Markdown pages (MyST), the API reference from
# the docstrings (numpydoc) and the command line's from its parser. A warning is an error,
# and every one is reported before the build fails.
docs: $(STAMP)
	$(BIN)/python -m sphinx -b html -W --keep-going -q docs docs/_build/html
	@echo "documentation in docs/_build/html/index.html"

clean:
	rm -rf $(HOME_DIR) .pytest_cache .hypothesis build *.egg-info docs/_build
