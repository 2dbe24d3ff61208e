# buildctl: the everyday entry points. `make help` lists them.
PYTHON ?= python3
BUILDCTL ?= $(PYTHON) -m buildctl
CUDA ?= 13
STACK ?= deepseek-v3-gb200
ifeq ($(CUDA),13)
VARIANT ?= cuda13
else ifeq ($(CUDA),12)
VARIANT ?= cuda12
else
$(error CUDA must be 13 or 12 (or set VARIANT=...), got CUDA=$(CUDA))
endif
PYTEST_ARGS ?=
BASE ?= nvcr-base

.PHONY: help install test unit lint docs demo demo-up demo-down image lock smoke verify push nightly bench

help:
	@echo "make demo              set up engine + registry + demo base, run the nightly job on the demo stack"
	@echo "make test              set up everything the tests need, run ALL tests (engine ones included)"
	@echo "make unit              unit tests only (no engine, no processes)"
	@echo "make lint              ruff + mypy --strict + vermin (smoke/ on Python 3.10, images/*.py on 3.8)"
	@echo "make docs              the docs site (mkdocs, strict: a broken link or a page left out fails) into site/"
	@echo "make image CUDA=13     build deepseek-v3-gb200 (CUDA=12 for cuda12; STACK=, VARIANT= override)"
	@echo "make lock|verify|push|nightly  STACK=, VARIANT= (or CUDA=) pick what; REGISTRY= where to push"
	@echo "make smoke IMAGE=ref   the smoke suite in an image (GPUS=1 for the GPU tier)"
	@echo "make bench             rebuild benchmark: buildctl vs two Dockerfiles (BENCH_ARGS=--quick: CI-sized)"
	@echo "make demo-up|demo-down engine + demo base + demo registry 127.0.0.1:5000 (what make demo uses)"

# The package in editable mode with the dev tools, and the commit-msg hook (.githooks/commit-msg: subject <= 72,
# a blank line, a body wrapped at 72; `make test` checks the commits again).
install:
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@if git rev-parse --git-dir >/dev/null 2>&1; then git config core.hooksPath .githooks \
	  && echo "commit-msg hook: git config core.hooksPath .githooks"; fi

# --progress-lines (tests/progress.py): a line per test as it ends (per file for unit tests), engine tests also
# when they start, so a long engine test never looks hung; --durations=25: CI logs name the slowest cases
# (set-up and teardown counted apart); -n 2 --dist loadfile: two workers, each test file in one of them (its
# module fixtures made once), engine files beside each other (tests/conftest.py says what makes that safe);
# --no-loadscope-reorder: files in collection order, so the engine files (few tests, most of the time) start
# first and the many short unit files even out the end, instead of one worker idling through the other's last
# engine file.
# The docs' strict build and the commit-message check are tests too (tests/integration/test_docs_site.py,
# test_commit_messages.py).
test:
	bash scripts/testenv.sh run -- $(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder --progress-lines --durations=25 $(PYTEST_ARGS)

unit: install
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

# smoke/ runs inside the images, the oldest on Python 3.10 (NGC 24.01): smoke/ruff.toml lints it for 3.10's
# syntax, vermin for 3.10's modules and members (tests/unit/test_smoke_python310.py runs both in the tests).
lint: install
	$(PYTHON) -m ruff check buildctl tests smoke bench scripts/gendocs.py scripts/commitmsg.py
	$(PYTHON) -m mypy
	$(PYTHON) -c 'import sys, vermin; sys.exit(vermin.main())' -q -t=3.10- --no-tips --violations smoke/
	$(PYTHON) -c 'import sys, vermin; sys.exit(vermin.main())' -q -t=3.8- --no-tips --violations images/protect.py images/install.py

# NO_MKDOCS_2_WARNING: mkdocs-material's notice about MkDocs 2.0 would open every build log
docs:
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

demo-up:
	bash scripts/testenv.sh up-demo

demo-down:
	bash scripts/testenv.sh down-demo

# The main job on the embedded demo stack: engine, demo base and registry 127.0.0.1:5000 (kept running;
# `make demo-down` stops them), then the nightly job. The host CA bundle is handed to lock-time pip runs
# (a TLS-intercepting proxy's CA lives there); it never reaches a layer.
demo: demo-up
	BUILDCTL_CA_BUNDLE=$${BUILDCTL_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt} $(BUILDCTL) nightly demo

image:
	$(BUILDCTL) build $(STACK) --variant $(VARIANT)

lock:
	$(BUILDCTL) lock $(STACK) --variant $(VARIANT)

verify:
	$(BUILDCTL) verify $(BASE) --stack $(STACK) --variant $(VARIANT)

# REGISTRY=host:port overrides the configured one; PROMOTE=1 moves latest after a passed smoke
push:
	$(BUILDCTL) push $(STACK) --variant $(VARIANT) $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(PROMOTE),--promote)

# IMAGE=ref (required); GPUS=1 runs the GPU tier
smoke:
	@test -n "$(IMAGE)" || { echo "make smoke needs IMAGE=<image ref>"; exit 2; }
	$(BUILDCTL) smoke $(IMAGE) --stack $(STACK) --variant $(VARIANT) $(if $(GPUS),--gpus)

NIGHTLY_STACKS ?= deepseek-v3-gb200 megatron-bert verl-vllm
nightly:
	$(BUILDCTL) nightly $(NIGHTLY_STACKS) $(if $(REGISTRY),--registry $(REGISTRY))

# The rebuild benchmark (bench/bench_rebuild.py): engine, demo base and registry as make demo sets them up,
# the host CA bundle for lock-time pip as make demo passes it. BENCH_ARGS=--quick: the CI-sized run.
bench: demo-up
	BUILDCTL_CA_BUNDLE=$${BUILDCTL_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt} PYTHONPATH=$(CURDIR) \
	  $(PYTHON) bench/bench_rebuild.py $(BENCH_ARGS)
