# Every target creates or reuses the virtual environment in .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
#: test processes (pytest-xdist; whole files per process, so module fixtures are shared):
#: most tests wait on a recorded subprocess, so two use a 2-core machine fully
TEST_WORKERS ?= 2

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch comes from the constraints file (torch==2.13.0, the local CPU wheel), never unpinned
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	@touch $(STAMP)

#: the compiled per-op path of the adapter (msprof_py/adapter/native) and the engine's compiled
#: scheduling core (msprof_py/device/native): built once per environment and again when their
#: sources change; where one cannot build, its Python counterpart runs
NATIVE := $(VENV)/.native

$(NATIVE): $(STAMP) msprof_py/adapter/native/*.cpp msprof_py/device/native/*.c msprof_py/device/native/*.h
	$(BIN)/python -m msprof_py.device.native build
	$(BIN)/python -m msprof_py.adapter.native build
	@touch $(NATIVE)

demo: $(NATIVE)  ## the main job: profile the ResNet sample on the simulated NPU
	$(BIN)/msprof --output=profile_data python sample_runs/train_resnet.py --steps 5

#: the suite starts a few hundred Python processes (msprof runs, fresh interpreters): compile
#: the package once, and let those processes and pytest keep their bytecode even where the
#: machine sets PYTHONDONTWRITEBYTECODE (each process would compile every module again)
PYTEST := $(BIN)/python -m compileall -q msprof_py && PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

test: $(NATIVE)  ## lint, then the test suite (slow tests excluded: make test PYTEST_ARGS="-m slow")
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-all: $(NATIVE)  ## everything, slow tests included (the whole OpInfo database ...)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "slow or not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(NATIVE)  ## performance measurements, written to benchmarks/RESULTS.md by hand
	$(BIN)/python benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
