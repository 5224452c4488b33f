# nbmp's two commands on a fresh machine: `make test` and `make lab`.
# PYTHON picks the interpreter; each interpreter gets its own virtualenv.
PYTHON ?= python3
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV ?= .venv-$(PYVER)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
# Only this CPU build of torch is on this project's machines (for Python 3.11); any
# other torch requirement would download a CUDA build of several GB.
TORCH_PIN := torch==2.13.0
WITH_TORCH ?= $(if $(filter 3.11,$(PYVER)),1,0)
PYTEST_ARGS ?=

# The Pythons a user may install the wheel on (make wheel-check).
WHEEL_PYTHONS ?= 3.10 3.11 3.12 3.13

.PHONY: test test-under-load fault-campaign typecheck lab demo notebooks docs browser-test bench clean venv wheel-check cpython-suite cpython-cf-suite

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -U pip
	$(PIP) install -e '.[test]'
	@if [ "$(WITH_TORCH)" = "1" ]; then $(PIP) install '$(TORCH_PIN)'; fi
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 >/dev/null
	touch $@

venv: $(VENV)/.installed

## make test: set up the virtualenv, type-check nbmp/ (mypy) and run the whole suite (notebooks included)
test: venv typecheck
	$(PY) -m pytest $(PYTEST_ARGS)

## make typecheck: mypy over nbmp/ (settings in pyproject.toml: strict for the public API)
typecheck: venv
	$(PY) -m mypy

## make cpython-suite: CPython's own multiprocessing tests (test._test_multiprocessing, every
## kind) under fork, spawn and forkserver, once with the standard module and once with nbmp in
## sys.modules["multiprocessing"]'s place; prints the counts and every test whose outcome differs
## (about 16 minutes on 2 cores; not part of `make test`). Deliberate differences: docs/dropin.md
cpython-suite: venv
	$(PY) scripts/cpython_mp_suite.py $(SUITE_ARGS)

## make cpython-cf-suite: the process-pool tests of CPython's own test.test_concurrent_futures
## (3.12+) under fork, forkserver and spawn, with the standard executor and with
## nbmp.ProcessPoolExecutor (and nbmp's contexts) in its place; prints the counts, every test
## whose outcome differs and every process a test left running, and fails on either
## (deliberate differences: docs/dropin.md). Not part of `make test`
cpython-cf-suite: venv
	$(PY) scripts/cpython_cf_suite.py $(SUITE_ARGS)

## make fault-campaign: the fault-injection suite's long run (scripts/fault_campaign.py): interrupts
## at random moments of every call (a real kernel's %%nbmp too) and SIGKILLs of busy parents;
## prints trials, lost interrupts, orphans, leaked bytes, slowest error (docs/reliability.md)
FAULT_ARGS ?= --trials 1000 --seed 1
fault-campaign: venv
	$(PY) scripts/fault_campaign.py $(FAULT_ARGS)

## make test-under-load: the suite while a neighbour (scripts/shm_churn.py) does its own
## multiprocessing and /dev/shm work on the same machine: the leak guard counts only ours
test-under-load: venv
	$(PY) scripts/shm_churn.py --seconds 3600 & churn=$$!; \
	$(MAKE) test PYTHON=$(PYTHON); status=$$?; \
	kill $$churn; wait $$churn; exit $$status

## make wheel-check: build the sdist and wheel, check they hold every module, then install the
## wheel (not editable) in a fresh virtualenv per Python in WHEEL_PYTHONS and run a notebook
## user's first steps there (scripts/smoke.py) and the quickstart notebook in a real kernel
wheel-check: venv
	$(PY) scripts/check_wheel.py $(WHEEL_PYTHONS)

## make demo: execute notebooks/quickstart.ipynb headless in a real kernel, print its output
demo: venv
	$(PY) scripts/run_notebook.py notebooks/quickstart.ipynb --print

## make lab: set up and serve the quickstart in JupyterLab; the URL it prints (with its
## token) opens notebooks/quickstart.ipynb itself (headless is fine)
lab: venv
	$(PIP) install -e '.[lab]'
	$(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --ServerApp.root_dir=$(CURDIR) \
		--LabApp.default_url=/lab/tree/notebooks/quickstart.ipynb \
		$(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf .venv-* *.egg-info .pytest_cache .mypy_cache build

## make notebooks: regenerate notebooks/*.ipynb from their .py sources
notebooks: venv
	$(PY) scripts/make_notebook.py notebooks/*.py

## make docs: build the docs site (MkDocs, strict: any warning fails) into build/docs
docs: venv
	$(PIP) install -e '.[docs]'
	$(VENV)/bin/mkdocs build --strict

## make browser-test: open the quickstart in JupyterLab in headless Chromium (Playwright) and
## check its live dashboard in the page; installs Debian's chromium (apt-get) if missing
browser-test: venv
	scripts/install_chromium.sh
	$(PIP) install -e '.[browser]'
	$(PY) -m pytest browser_tests $(PYTEST_ARGS)

## make bench: every benchmark, nbmp beside its peers in one run each (a quiet machine, please);
## Markdown tables to build/bench/, plots to docs/img/bench_*.png (pasted into docs/benchmarks.md)
bench: venv
	$(PIP) install -e '.[bench]'
	mkdir -p build/bench
	for b in spawn scaling pool sharing dashboard cluster; do \
		PYTHONPATH=. $(PY) benchmarks/bench_$$b.py --plot docs/img/bench_$$b.png > build/bench/$$b.md || exit 1; \
		cat build/bench/$$b.md; \
	done
	PYTHONPATH=. $(PY) benchmarks/fork_safety.py > build/bench/fork_safety.md && cat build/bench/fork_safety.md
	PYTHONPATH=. $(PY) benchmarks/fork_shapes.py > build/bench/fork_shapes.md && cat build/bench/fork_shapes.md
