# nbmp's two commands on a fresh machine: `make test` and `make lab`.
# PYTHON picks the interpreter; each interpreter gets its own virtualenv.
PYTHON ?= python3
PYVER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV ?= .venv-$(PYVER)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip -q --disable-pip-version-check
# Only `make test` (and the targets built on its virtualenv) installs torch, and only on
# Python 3.11. The `+cpu` label matches the CPU build alone (found only where pip is configured
# with a wheel directory or https://download.pytorch.org/whl/cpu); where none is reachable the install is skipped and
# the torch tests skip, so the pin can never pull PyPI's CUDA build of several GB.
# WITH_TORCH=0 skips it too.
TORCH_PIN := torch==2.13.0+cpu
WITH_TORCH ?= $(if $(filter 3.11,$(PYVER)),1,0)
PYTEST_ARGS ?=

# The Pythons a user may install the wheel on: pyenv's (make wheel-check) and Debian sid's (make sid-wheel-check).
WHEEL_PYTHONS ?= 3.10 3.11 3.12 3.13
SID_PYTHONS ?= 3.14 3.15
# The one sid Python that sid-test and sid-cpython-suite run on (make sid-test SID_PYTHON=3.14).
SID_PYTHON ?= 3.15

.PHONY: test test-under-load fault-campaign typecheck lab demo notebooks docs browser-test bench clean venv wheel-check cpython-suite \
	cpython-cf-suite sid-test sid-wheel-check sid-cpython-suite sid-clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -U pip
	$(PIP) install -e '.[test]'
	@if [ "$(WITH_TORCH)" = "1" ]; then $(PIP) install '$(TORCH_PIN)' || \
		echo "$(TORCH_PIN) not found: the torch tests will skip"; fi
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
## multiprocessing and /dev/shm work on the same machine: the leak guard counts only ours; a
## neighbour that hung (it prints its threads' tracebacks) fails the run too
test-under-load: venv
	$(PY) scripts/shm_churn.py --seconds 3600 & churn=$$!; \
	$(MAKE) test PYTHON=$(PYTHON); status=$$?; \
	kill $$churn; wait $$churn || status=1; exit $$status

## make wheel-check: build the sdist and wheel, check they hold every module, then install the
## wheel (not editable) in a fresh virtualenv per Python in WHEEL_PYTHONS and run a notebook
## user's first steps there (scripts/smoke.py) and the quickstart notebook in a real kernel
wheel-check: venv
	$(PY) scripts/check_wheel.py $(WHEEL_PYTHONS)

## make sid-test, sid-wheel-check, sid-cpython-suite: `make test`, `make wheel-check` and
## `make cpython-suite` on Debian sid's Python 3.14 and 3.15, which pyenv does not have here. As
## root, scripts/sid.sh makes a Debian sid root with those Pythons and CPython's test packages once
## (debootstrap, about a minute; kept in SID_ROOT, default /var/cache/nbmp-sid) and runs the target
## there with the checkout mounted at /nbmp; every mount ends with the target. No torch there.
## `make sid-clean` removes the root.
sid-test:
	scripts/sid.sh make test PYTHON=python$(SID_PYTHON) PYTEST_ARGS='$(PYTEST_ARGS)'

sid-wheel-check:
	scripts/sid.sh make wheel-check PYTHON=python$(lastword $(SID_PYTHONS)) WHEEL_PYTHONS='$(SID_PYTHONS)'

sid-cpython-suite:
	scripts/sid.sh make cpython-suite PYTHON=python$(SID_PYTHON) SUITE_ARGS='$(SUITE_ARGS)'

sid-clean:
	scripts/sid.sh --clean

## make demo: execute notebooks/quickstart.ipynb headless in a real kernel, print its output
demo: venv
	$(PY) scripts/run_notebook.py notebooks/quickstart.ipynb --print

## make lab: a virtualenv with nbmp[lab] only (JupyterLab, ipywidgets; no torch, no test tools),
## then JupyterLab on the quickstart; the URL it prints (with its token) opens it (headless is fine)
$(VENV)/.lab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[lab]'
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 >/dev/null
	touch $@

lab: $(VENV)/.lab
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
	PYTHONPATH=. $(PY) benchmarks/worker_pages.py > build/bench/worker_pages.md && cat build/bench/worker_pages.md
