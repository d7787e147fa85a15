# Two commands: `make run` and `make test`. Everything either needs is installed from here.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
export PORT

.PHONY: run serve test venv dev system-test-deps lint bench clean-venv docs

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Then the project itself, editable, so scripts import app/config/database/services/routes from any
# directory. No build isolation: setuptools comes pinned from requirements.txt, nothing is downloaded.
$(VENV)/.installed: requirements.txt pyproject.toml $(VENV)/bin/python
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt $(VENV)/.installed
	$(PY) -m pip install -q -r requirements-dev.txt
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

## make test: dev requirements, headless Chromium and PostgreSQL (Debian packages), then the whole suite
test: dev system-test-deps
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

bench: dev
	$(PY) scripts/bench_recall.py
