# make demo: train HER on bit flipping and print the success rate.
# make test: run the test suite.
# Both create .venv when it is missing and install what they need into it.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# the installers' output goes to a log, printed only when they fail
QUIET = > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)

.PHONY: demo test test-slow install bench clean

$(PY):
	@echo "creating $(VENV) and installing herl (the installers' output: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip $(QUIET)

# torch==2.13.0 is the local CPU build on our machines; any other spec pulls GBs of CUDA wheels.
$(VENV)/.torch-installed: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet torch==2.13.0 $(QUIET)
	@touch $@

# installed again only when pyproject.toml changes (the package itself is installed editable)
$(VENV)/.installed: pyproject.toml $(VENV)/.torch-installed
	@$(PIP) install --quiet -e ".[test]" $(QUIET)
	@touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m herl.demo

# the suite without the tests that learn for seconds or start Ray (marked slow); CI runs both
test: install
	$(PY) -m pytest -q -m "not slow"

test-slow: install
	$(PY) -m pytest -q -m slow

bench: $(VENV)/.torch-installed
	@$(PIP) install --quiet -e ".[test,bench]" $(QUIET)
	$(PY) benchmarks/buffer_throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info
