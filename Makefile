# make demo: the whole system on an embedded default (SQLite, filesystem broker).
# make test: the whole suite against PostgreSQL and Redis (started if stopped).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/rollout
REDIS_URL ?= redis://127.0.0.1:6379/15
ARGS ?=

.PHONY: demo test lint format bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

demo: $(VENV)/.installed
	$(PY) -m demo $(ARGS)

test: $(VENV)/.installed
	bash scripts/system-deps.sh
	bash scripts/services.sh
	DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) $(PY) -m pytest $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(VENV)/.installed
	bash scripts/services.sh
	DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) $(PY) -m benchmarks $(ARGS)

clean:
	rm -rf .run db.sqlite3 db.sqlite3-* .pytest_cache .ruff_cache .hypothesis
