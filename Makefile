# Two commands: `make run` and `make test`. Everything either needs is installed from here.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
export PORT

.PHONY: run serve two-hosts two-hosts-kill two-hosts-rolling test venv dev system-test-deps lint bench clean-venv docs lock

# The venv's own pip (ensurepip's) only installs uv and, for make lock, pip-tools: no upgrade fetched for it.
$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# The installer: uv (PyPI, pinned), which fetches, installs and compiles the locked packages in parallel: in a
# fresh venv with no cache, 41 s where pip took 112-252 s (docs/benchmarks.md). The bytecode is compiled at
# install (--compile-bytecode), as pip does: where PYTHONDONTWRITEBYTECODE is set (as on the machines here) nothing is
# compiled later, and every process would compile every package it imports again. pip stays in the venv (make
# lock uses pip-tools).
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
$(UV): $(VENV)/bin/python
	$(PY) -m pip install -q uv==$(UV_VERSION)

# The packages come from the lock files (every package, transitive ones too, at one version; `make lock`
# regenerates them from requirements.txt / requirements-dev.txt). Then the project itself, editable, so scripts
# import app/config/database/services/routes from any directory. No build isolation: setuptools comes pinned from
# the lock, nothing is downloaded.
$(VENV)/.installed: requirements.lock pyproject.toml $(UV)
	$(UV) pip install -q --compile-bytecode --python $(PY) -r requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.dev-installed: requirements-dev.lock $(VENV)/.installed
	$(UV) pip install -q --compile-bytecode --python $(PY) -r requirements-dev.lock
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.dev-installed

## make run: set up .venv, migrate the SQLite database under data/, serve on 127.0.0.1:$(PORT) (offline providers)
run: venv
	$(PY) scripts/migrate.py
	$(PY) app.py

## make serve: production mode: gunicorn worker processes on PostgreSQL (DATABASE_URL and SECRET_KEY required)
serve: venv
	$(PY) scripts/serve.py

## make two-hosts: PostgreSQL + pgbouncer, two `make serve` hosts and HAProxy (deploy/) on 127.0.0.1, until Ctrl-C
two-hosts: venv
	bash scripts/two_hosts.sh up

## make two-hosts-kill / two-hosts-rolling: 600 participants through the balancer; kill -9 a host midway / restart both
two-hosts-kill: venv
	bash scripts/two_hosts.sh kill --participants 600 --register-over 200 --messages 4 --think 10

two-hosts-rolling: venv
	bash scripts/two_hosts.sh rolling --participants 600 --register-over 200 --messages 4 --think 10

## make test: dev requirements, headless Chromium and PostgreSQL (Debian packages), then the whole suite
# The venv (downloads from PyPI) and the Debian packages (apt) are set up side by side: neither needs the other.
test:
	$(MAKE) -j2 --output-sync=target dev system-test-deps
	bash scripts/run_tests.sh

system-test-deps:
	bash scripts/install_test_deps.sh

## make lint: ruff, the package layers of services/ (pyproject.toml [tool.layers]) and, when ../shared is there, its layer check
lint: dev
	$(VENV)/bin/ruff check .
	$(PY) scripts/check_layers.py
	if [ -f ../shared/tools/layers.py ]; then python3 ../shared/tools/layers.py; fi

## make docs: the reference documentation (docs/, mkdocs.yml) built with --strict into .cache/site
docs: dev
	$(VENV)/bin/mkdocs build --strict --quiet

## make lock: resolve requirements.txt and requirements-dev.txt into the pinned lock files the installs read
LOCK_FLAGS := -q --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe
lock: $(VENV)/bin/python
	$(PY) -m pip install -q pip-tools==7.6.2
	$(VENV)/bin/pip-compile $(LOCK_FLAGS) -o requirements.lock requirements.txt
	$(VENV)/bin/pip-compile $(LOCK_FLAGS) --constraint requirements.lock -o requirements-dev.lock requirements-dev.txt

bench: dev
	$(PY) scripts/bench_recall.py
