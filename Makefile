# Two commands after a clone: `make demo` and `make test`. Each builds the
# virtual environment on first use (python3 + PyPI only, nothing global).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What the demo needs (the package and its runtime dependencies), without the dev toolchain.
RUNTIME_STAMP := $(VENV)/.installed-runtime
# The aggregator's hot loop, compiled with Cython where a C compiler is (else it runs in Python).
LOOPS := services/aggregator/gpuscale_aggregator/core/_loops

.PHONY: demo test lint typecheck imports unit venv compiled clean bench images images-push compose-up compose-down

venv: $(STAMP) compiled

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP) $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(RUNTIME_STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/gpuscale demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: the suite starts hundreds of
# Python processes of our own services, each of which would compile the package anew (~10 % of its CPU).
unit: $(STAMP) compiled
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest $(PYTEST_ARGS)

# A failed build is not an error: the same loop runs in Python (about 3x the CPU per sample), and
# the aggregator logs which one it runs. CI sets GPUSCALE_REQUIRE_COMPILED, which fails the twin test.
compiled: $(LOOPS).built

$(LOOPS).built: $(LOOPS).pyx $(STAMP)
	@rm -f $(LOOPS).*.so
	@if $(BIN)/cythonize -i -3 -q $(LOOPS).pyx >$(LOOPS).log 2>&1; then rm -f $(LOOPS).log; \
	else echo "the aggregator's compiled loop did not build ($(LOOPS).log): it runs in Python"; fi
	@rm -rf services/aggregator/build
	@touch $@

# The README's test command: every habit check, then the whole suite.
test: lint typecheck imports unit

# Container images, tagged with the package version: docker, podman or buildah,
# whichever works here (docker/images.sh; REGISTRY=... TAG=... ENGINE=... to choose).
images:
	docker/images.sh build

images-push:
	docker/images.sh push

# The simulation as containers (docker-compose.yml) with docker compose or
# podman-compose. NATS passwords are made once, random, in .compose.env.
COMPOSE_ROLES := COLLECTOR AGGREGATOR DECIDER ACTUATOR OBSERVER SETUP
COMPOSE ?= $(shell if docker compose version >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo "docker compose"; \
	elif command -v podman-compose >/dev/null; then echo podman-compose; \
	elif command -v docker-compose >/dev/null; then echo docker-compose; fi)

.compose.env:
	@umask 077; for r in $(COMPOSE_ROLES); do \
	  echo "NATS_$${r}_PASSWORD=$$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; done > $@
	@echo "GPUSCALE_VERSION=$$(sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)" >> $@
	@echo "wrote $@ (NATS passwords for the compose simulation)"

compose-up: .compose.env images
	@test -n "$(COMPOSE)" || { echo "no docker compose or podman-compose on this machine"; exit 2; }
	@# A .compose.env from an older version lacks the newer roles' passwords: add them.
	@umask 077; for r in $(COMPOSE_ROLES); do grep -q "^NATS_$${r}_PASSWORD=" .compose.env || \
	  echo "NATS_$${r}_PASSWORD=$$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >> .compose.env; done
	set -a && . ./.compose.env && set +a && $(COMPOSE) up -d

compose-down: .compose.env
	@test -n "$(COMPOSE)" || { echo "no docker compose or podman-compose on this machine"; exit 2; }
	set -a && . ./.compose.env && set +a && $(COMPOSE) down --volumes

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
