# make demo: train HER on bit flipping and print the success rate.
# make test: run the test suite.
# Both create .venv when it is missing and install what they need into it.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test install bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch==2.13.0 is the local CPU build on our machines; any other spec pulls GBs of CUDA wheels.
$(VENV)/.torch-installed: $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet torch==2.13.0
	@touch $@

install: $(VENV)/.torch-installed
	$(PIP) install --quiet -e ".[test]"

demo: install
	$(PY) -m herl.demo

test: install
	$(PY) -m pytest -q

bench: $(VENV)/.torch-installed
	$(PIP) install --quiet -e ".[test,bench]"
	$(PY) benchmarks/buffer_throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info
