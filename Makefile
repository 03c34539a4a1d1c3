# effectively-once: `make up` runs the demo, `make test` proves it. `make help` lists the rest.
#
# Everything is bootstrapped here: uv (the Python package manager) into a cached tools venv, then
# the locked dependencies (uv.lock) into a cached virtual environment. Both live outside the
# checkout, in $(CACHE_DIR), so a second run or a second clone starts in seconds.

SHELL := /bin/bash
.DEFAULT_GOAL := help

CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/effectively-once
UV_VERSION := 0.13.9
TOOLS := $(CACHE_DIR)/tools
UV := $(TOOLS)/bin/uv
VENV := $(CACHE_DIR)/venv
PY := $(VENV)/bin/python

export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never
# Bytecode compiled once, beside the venv and the sources: where PYTHONDONTWRITEBYTECODE is set (as
# on CI) nothing is cached at import, and every process started compiled its modules again (about
# 0.4 s of CPU of a service's start: README, "make test").
export UV_COMPILE_BYTECODE := 1
PACKAGES := effectively_once services outbox_relay chaos_panel auditor infra labs soak dashboards workbench benchmarks
export EO_CACHE_DIR := $(CACHE_DIR)

# Compose when a Docker engine answers; the native launcher otherwise (this is decided per call).
DOCKER_ENGINE = $(shell timeout 5 docker info >/dev/null 2>&1 && echo yes)
# INVENTORY_IMPL=java|node puts that implementation in the inventory slot: natively the launcher
# reads it; with compose, its file in infra/compose/ goes over docker-compose.yml.
# BROKERS=3 lays infra/compose/brokers-3.yml over it: three Kafka nodes, every topic replicated.
# RELAY=debezium lays infra/compose/relay-debezium.yml over it: Debezium in Kafka Connect relays.
# POSTGRES=ha lays infra/compose/postgres-ha.yml over it: a primary and a streaming standby, every
# service connecting through both; POSTGRES_SYNC=off makes the standby asynchronous.
COMPOSE_FILES = $(if $(filter java node,$(INVENTORY_IMPL))$(filter 3,$(BROKERS))$(filter debezium,$(RELAY))$(filter ha,$(POSTGRES)),-f docker-compose.yml) \
  $(if $(filter java node,$(INVENTORY_IMPL)),-f infra/compose/inventory-$(INVENTORY_IMPL).yml) \
  $(if $(filter 3,$(BROKERS)),-f infra/compose/brokers-3.yml) \
  $(if $(filter debezium,$(RELAY)),-f infra/compose/relay-debezium.yml) \
  $(if $(filter ha,$(POSTGRES)),-f infra/compose/postgres-ha.yml)
COMPOSE_KAFKA_3 := kafka:19092,kafka-2:19092,kafka-3:19092
COMPOSE_POSTGRES_PAIR := COMPOSE_POSTGRES_HOSTS=postgres:5432,postgres-standby:5432 \
  COMPOSE_POSTGRES_QUERY='?target_session_attrs=read-write' \
  COMPOSE_POSTGRES_SYNC_NAMES='$(if $(filter off,$(POSTGRES_SYNC)),,FIRST 1 (standby))'
COMPOSE = $(if $(filter 3,$(BROKERS)),COMPOSE_KAFKA_BOOTSTRAP=$(COMPOSE_KAFKA_3)) \
  $(if $(filter ha,$(POSTGRES)),$(COMPOSE_POSTGRES_PAIR)) docker compose $(strip $(COMPOSE_FILES))
LAUNCHER := $(PY) -m infra.launcher
PYTEST_ARGS ?=

.PHONY: help up down restart status logs broker db test test-unit test-integration test-e2e browser lint typecheck bench load audit horizon dashboards soak lab inventory-node inventory-java \
        lock venv clean-state

help: ## Show this help
	@echo "effectively-once: the idempotent-consumer pattern, proven end to end"
	@echo
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'
	@echo
	@echo "Without a Docker engine, make up runs PostgreSQL, Kafka and the services natively."

$(UV):
	@command -v python3 >/dev/null || { echo "python3 (3.11+) is required: install it first" >&2; exit 2; }
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "python3 is $$(python3 --version); 3.11 or newer is required" >&2; exit 2; }
	@echo "bootstrapping uv $(UV_VERSION) into $(TOOLS) (first run only)"
	@python3 -m venv $(TOOLS)
	@$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

venv: $(UV) ## Create or update the virtual environment from uv.lock
	@$(UV) sync --frozen --quiet
	@$(PY) -m compileall -q -j0 $(PACKAGES) tests >/dev/null

up: venv ## Run the whole demo (compose with a Docker engine, else native); REPLICAS=3 scales consumers and relay, INVENTORY_IMPL=java|node swaps inventory, RELAY=debezium relays with Debezium, POSTGRES=ha runs a primary and a standby
ifeq ($(DOCKER_ENGINE),yes)
	$(COMPOSE) up --detach --build --wait \
	  $(if $(REPLICAS),$(foreach s,outbox-relay orders-saga inventory payment notification sales-projection,--scale $(s)=$(REPLICAS)),)
	@echo "Chaos panel: http://127.0.0.1:8080   Prometheus: http://127.0.0.1:9090   Grafana: http://127.0.0.1:3000"
	@token=$$($(COMPOSE) logs chaos-panel 2>/dev/null | grep -o 'panel-token=[A-Za-z0-9_-]*' | tail -1 | cut -d= -f2); \
	  [ -z "$$token" ] || echo "The panel needs its token: log in at http://127.0.0.1:8080/login with $$token"
else
	@$(LAUNCHER) up
endif

down: venv ## Stop everything `make up` started
	@$(LAUNCHER) down
ifeq ($(DOCKER_ENGINE),yes)
	$(COMPOSE) down
endif

restart: venv ## Restart the platform's processes after a code change (native path)
	@$(LAUNCHER) restart

status: venv ## Show each process and whether it runs
ifeq ($(DOCKER_ENGINE),yes)
	$(COMPOSE) ps
else
	@$(LAUNCHER) status
endif

logs: venv ## Follow every process's log
ifeq ($(DOCKER_ENGINE),yes)
	$(COMPOSE) logs --follow --tail 40
else
	@$(LAUNCHER) logs --follow
endif

test: venv lint browser inventory-node inventory-java ## Run every test tier against real PostgreSQL and Kafka (starts them as needed; end-to-end beside the rest)
	@bash tests/run_tiers.sh $(PY) $(PYTEST_ARGS)

test-unit: venv ## Unit tests only (no I/O)
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

test-integration: venv ## Integration tests (real PostgreSQL and Kafka)
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

test-e2e: venv browser ## End-to-end tests of the launcher and the running system (the panel's in Chromium)
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

browser: ## Debian's chromium and chromedriver, for the panel's browser tests (installed when missing)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "installing Debian's chromium and chromium-driver (first run only)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; else \
	    echo "chromium and chromium-driver are missing: install them (apt-get install chromium chromium-driver)" >&2; exit 2; fi; \
	  $$SUDO apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && $$SUDO apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; }; }

lint: venv inventory-node ## ruff and mypy; tsc for the TypeScript consumer
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy effectively_once outbox_relay services chaos_panel auditor infra dashboards tests benchmarks soak labs workbench
	@cd $(NODE_INVENTORY) && npx --no-install tsc -p . --noEmit

# The TypeScript inventory consumer: npm ci from its lockfile (npm's cache is outside the
# checkout, so a second clone installs in seconds), then tsc into dist/.
NODE_INVENTORY := services/inventory-node
inventory-node: $(NODE_INVENTORY)/dist/main.js ## Build the TypeScript inventory consumer (services/inventory-node)

$(NODE_INVENTORY)/node_modules/.package-lock.json: $(NODE_INVENTORY)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js 20+) is required for services/inventory-node: install nodejs and npm" >&2; exit 2; }
	@cd $(NODE_INVENTORY) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The Java inventory consumer: Maven resolves Spring Boot into ~/.m2 (outside the checkout) and
# builds one executable jar; make-class-archive.sh lays it out in target/extracted/ with a class
# archive that halves a start's CPU.
JAVA_INVENTORY := services/inventory-java
inventory-java: $(JAVA_INVENTORY)/target/extracted/inventory-java.jar ## Build the Java (Spring Boot) inventory consumer (services/inventory-java)

$(JAVA_INVENTORY)/target/extracted/inventory-java.jar: $(JAVA_INVENTORY)/target/inventory-java.jar $(JAVA_INVENTORY)/make-class-archive.sh
	@sh $(JAVA_INVENTORY)/make-class-archive.sh $< $(JAVA_INVENTORY)/target/extracted
	@touch $@

$(JAVA_INVENTORY)/target/inventory-java.jar: $(JAVA_INVENTORY)/pom.xml $(shell find $(JAVA_INVENTORY)/src -type f 2>/dev/null)
	@command -v mvn >/dev/null || { echo "Maven and Java 17+ are required for services/inventory-java: install maven and openjdk-17-jdk" >&2; exit 2; }
	@cd $(JAVA_INVENTORY) && mvn -B -q -Dstyle.color=never package -DskipTests
	@touch $@

$(NODE_INVENTORY)/dist/main.js: $(NODE_INVENTORY)/node_modules/.package-lock.json $(NODE_INVENTORY)/tsconfig.json $(wildcard $(NODE_INVENTORY)/src/*.ts $(NODE_INVENTORY)/src/*/*.ts)
	@cd $(NODE_INVENTORY) && npx --no-install tsc -p .
	@touch $@

lock: $(UV) ## Re-resolve uv.lock after changing pyproject.toml
	$(UV) lock

clean-state: venv ## Stop the native stack and delete its data (databases, topics, logs)
	@$(LAUNCHER) down
	@rm -rf "$$($(PY) -c 'from services.settings import Settings; print(Settings().EO_STATE_DIR)')"
	@echo "native state removed"

bench: venv ## Every benchmark in one run: one table with targets, JSON and a PNG (artifacts/bench/)
	$(PY) -m benchmarks

RATE ?= 20
COUNT ?= 100
DURATION ?= 120
soak: venv ## Orders under a chaos schedule, then the auditor (make soak DURATION=600 RATE=8 REPLICAS=3 BROKERS=3 SEED=1); exit 1 on any anomaly
	@$(if $(filter command line,$(origin REPLICAS) $(origin BROKERS)),$(MAKE) --no-print-directory up,true)
	@$(PY) -m soak --duration $(DURATION) --rate $(if $(filter command line,$(origin RATE)),$(RATE),8) \
	  $(if $(filter command line,$(origin COUNT)),--count $(COUNT),) \
	  $(if $(filter command line,$(origin SEED)),--seed $(SEED),)

broker: venv ## The Kafka nodes and what each leads; make broker DO="kill-leader orders.events/0" | DO="freeze 2" | DO=restart-controller
	@$(LAUNCHER) broker $(DO)

db: venv ## The PostgreSQL pair (POSTGRES=ha); make db DO=failover | DO=detach-standby | DO=sync-off | DO=rewind (to before the first message a failover lost)
	@$(LAUNCHER) db $(DO)

load: venv ## Place COUNT orders at RATE per second (make load RATE=20 COUNT=300)
	@$(PY) -m services.orders.load --rate $(RATE) --count $(COUNT)

dashboards: venv ## Write the Grafana dashboards' JSON (dashboards/generated/) from dashboards/build.py
	@$(PY) -m dashboards

NAME ?=
lab: venv ## Run a workshop lab unattended and check it (make lab NAME=crash-after-commit, NAME=all; no NAME lists them)
	@if [ -z "$(NAME)" ]; then $(PY) -m labs; else \
	  $(PY) -m labs --known $(NAME) && $(MAKE) --no-print-directory up $$($(PY) -m labs --system $(NAME)) \
	  && $(PY) -m labs $(NAME); fi

horizon: venv ## Each consumer's shortest safe marker retention from what could still be redelivered (exit 1 when shorter)
	@$(PY) -m services.safe_horizons

audit: venv ## Prove from the databases that nothing was lost or doubled (exit 1 on any anomaly); list dead letters
	@$(PY) -m auditor
