# make demo: train HER on bit flipping and print the success rate.
# make test: run the test suite.
# Both create .venv when it is missing and install what they need into it.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# the installers' output goes to a log, printed only when they fail
QUIET = > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)

.PHONY: demo test test-slow test-oldest-torch install bench clean

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
# the oldest torch herl supports (pyproject's torch>=2.3, with the NumPy 1 it was built for): the suite without the
# slow tests, in a venv of its own. PyPI has only the CUDA build of torch 2.3 (about 2.5 GB with its CUDA
# libraries), which runs on a CPU too. Ray is left out (its tests skip).
OLDEST := .venv-oldest-torch
test-oldest-torch:
	@test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	@$(OLDEST)/bin/python -m pip install --quiet "torch==2.3.1" "numpy<2" pytest hypothesis "stable-baselines3>=2.3" \
		"sb3-contrib>=2.3" cpprb "gymnasium-robotics>=1.4" "mujoco>=3.0,<=3.11.0" tensorboard matplotlib onnx \
		onnxruntime "minari[hdf5]>=0.5,<0.6" "mujoco-mjx>=3.0,<=3.11.0" > $(OLDEST)/install.log 2>&1 || (cat $(OLDEST)/install.log; exit 1)
	@$(OLDEST)/bin/python -m pip install --quiet -e . >> $(OLDEST)/install.log 2>&1
	$(OLDEST)/bin/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) $(OLDEST) build src/*.egg-info
