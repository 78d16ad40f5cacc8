# slurm-rl: `make demo` and `make test` are the two commands a fresh clone needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch goes in first and on its own, so that nothing pulls a multi-GB CUDA build. Where no
# CPU-only wheel is at hand, point pip at a CPU wheel index through PIP_TORCH_ARGS.
TORCH_SPEC ?= torch==2.13.0
PIP_TORCH_ARGS ?=
STAMP := $(VENV)/.installed

# The Slurm versions the live suite also runs against in containers (docker-compose.yml):
# trixie = Slurm 24.11, sid = 26.05 (bookworm = 22.05). COMPOSE_SUITES= skips that part.
COMPOSE_SUITES ?= trixie sid

.PHONY: demo test venv system-deps unit integration typecheck lint bench train-default train-no-comm clean docker-base compose-test

# A loaded synthetic day (after a warm-up day) where the order matters: the cluster scaled to
# offered load 3 (docs/sweep.md: ~90 % busy, an hour's queue), dispatch on (docs/daemon.md).
DEMO_POLICIES = fifo+fastest-gpu,multifactor+fastest-gpu,sjf-predicted+fastest-gpu,sjf-oracle+fastest-gpu,rl+rl
DEMO_ARGS = --days 1 --warmup-days 1 --load 3 --dispatch --policies $(DEMO_POLICIES)

demo: $(STAMP)
	$(VENV)/bin/slurm-rl simulate $(DEMO_ARGS) --report reports/demo

test: $(STAMP) system-deps
	$(PY) -m pytest -q
	$(if $(strip $(COMPOSE_SUITES)),bash scripts/compose-test.sh $(COMPOSE_SUITES))

# Docker's engine (started when none runs) and the base images slurm-rl/debian:<suite>:
# pulled where a registry answers, else made by debootstrap.
docker-base:
	bash scripts/docker-engine.sh
	bash scripts/docker-base.sh $(COMPOSE_SUITES)

# The compose part of the live suite, for each of COMPOSE_SUITES (scripts/compose-test.sh).
compose-test: $(STAMP)
	bash scripts/compose-test.sh $(COMPOSE_SUITES)

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PIP_TORCH_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev,ray]'
	touch $@

# Debian packages the integration tests need (Slurm, munge, PostgreSQL); quick when already
# installed.
system-deps:
	bash scripts/install-slurm.sh
	bash scripts/install-postgres.sh

unit: $(STAMP)
	$(PY) -m pytest -q -m "not slurm"

integration: $(STAMP) system-deps
	$(PY) -m pytest -q -m slurm

typecheck: $(STAMP)
	$(VENV)/bin/mypy

lint: $(STAMP)
	$(VENV)/bin/ruff check slurm_rl tests benchmarks db

bench: $(STAMP)
	$(PY) benchmarks/replay_philly.py
	$(PY) benchmarks/daemon_cycle.py
	$(PY) benchmarks/rwgp_cycle.py
	$(PY) benchmarks/ordering_inference.py

# Reproduce the shipped dual-agent bundle (session 31; docs/training.md): Philly Oct-Nov
# episodes at four offered loads with dispatch, the ordering a residual on sjf-limit (the
# ordering prior), validation on the last September week at the same loads; ~16 min on 2 cores.
TRAIN_DEFAULT_ARGS = --dispatch --loads 0.5,0.7,0.85,1.0 --validation-window 2017-09-24:2017-10-01 \
	--ordering-sharpness 8 --ordering-teacher limit
GUARD_OFF = session 36: the 168 h age guard cost JCT at offered loads 0.85-1.0 on Philly Sep-Nov \
	(docs/training.md, Session 36)
SHARP_32 = session 37: chosen on Philly Sep-Nov (docs/training.md, Session 37; its September 0.85 \
	figure is corrected in Session 38)
NO_EXCLUSIONS = session 39: the RWGP chooser without gang exclusions, chosen on Philly Sep-Nov at \
	offered loads 0.7-1.0 (docs/training.md, Session 39)
LONG_JOBS = session 40: gang exclusions back, and jobs with a time limit of a day or more kept off \
	slow nodes, chosen on Philly Sep-Nov at offered loads 0.7-1.0 (docs/training.md, Session 40)
LONG_ONLY = session 41: only jobs with a time limit of a day or more kept off slow nodes (no gang \
	rule), chosen on Philly Sep-Nov at offered loads 0.7-1.0 (docs/training.md, Session 41)
# Then the settings it ships with, chosen after training on Sep-Nov (meta.json's
# settings_changed says when and why): the age guard off, the ordering prior at 32, the chooser
# without gang exclusions, the chooser that excludes for gangs and for long jobs, then the one
# that excludes for long jobs alone.
train-default: $(STAMP)
	$(VENV)/bin/slurm-rl train $(TRAIN_DEFAULT_ARGS) --output policies/default
	$(VENV)/bin/slurm-rl bundle set policies/default --starvation-h 0 --reason "$(GUARD_OFF)"
	$(VENV)/bin/slurm-rl bundle set policies/default --ordering-sharpness 32 --reason "$(SHARP_32)"
	$(VENV)/bin/slurm-rl bundle set policies/default --chooser rwgp --reason "$(NO_EXCLUSIONS)"
	$(VENV)/bin/slurm-rl bundle set policies/default --chooser rwgp-excluding-long --reason "$(LONG_JOBS)"
	$(VENV)/bin/slurm-rl bundle set policies/default --chooser rwgp-long --reason "$(LONG_ONLY)"

# The no-communication ablation, trained as such with the shipped bundle's recipe and deployed
# with its settings (~16 min on 2 cores with Ray): evaluate reads it with --no-comm-bundle
# policies/no-communication.
AS_DEFAULT = session 44: the deployed settings of policies/default, for a like-for-like ablation
train-no-comm: $(STAMP)
	$(VENV)/bin/slurm-rl train $(TRAIN_DEFAULT_ARGS) --no-communication --output policies/no-communication
	$(VENV)/bin/slurm-rl bundle set policies/no-communication --starvation-h 0 \
		--ordering-sharpness 32 --chooser rwgp-long --reason "$(AS_DEFAULT)"

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache
