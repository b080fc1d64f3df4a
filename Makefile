# The two quick-start commands of the README: `make perf` and `make test`.
# Each installs what it needs first (torch 2.13 CPU build, executorch 1.5.1, this plugin).
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install perf test

install:
	$(PIP) install --quiet "torch==2.13.0"
	$(PIP) install --quiet -e ".[test]"

perf: install
	$(PYTHON) -m pytest perf_tests/ -m sme2

test: install
	$(PYTHON) -m pytest tests/ -n 2
