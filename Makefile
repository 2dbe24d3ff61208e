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

.PHONY: help install test unit lint demo demo-up demo-down image lock smoke verify push nightly bench

help:
	@echo "make demo              set up engine + registry + demo base, run the nightly job on the demo stack"
	@echo "make test              set up everything the tests need, run ALL tests (engine ones included)"
	@echo "make unit              unit tests only (no engine, no processes)"
	@echo "make lint              ruff + mypy --strict"
	@echo "make image CUDA=13     build deepseek-v3-gb200 (CUDA=12 for cuda12; STACK=, VARIANT= override)"
	@echo "make lock|smoke|verify|push|nightly|bench"
	@echo "make demo-up|demo-down engine + demo base + demo registry 127.0.0.1:5000 (what make demo uses)"

install:
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[dev]'

test:
	bash scripts/testenv.sh run -- $(PYTHON) -m pytest $(PYTEST_ARGS)

unit: install
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

lint: install
	$(PYTHON) -m ruff check buildctl tests smoke bench
	$(PYTHON) -m mypy

demo-up:
	bash scripts/testenv.sh up-demo

demo-down:
	bash scripts/testenv.sh down-demo

demo:
	@echo "make demo: not built yet (issue 3/5: build and nightly on the demo stack)"; exit 64

image:
	$(BUILDCTL) build $(STACK) --variant $(VARIANT)

lock:
	$(BUILDCTL) lock $(STACK) --variant $(VARIANT)

smoke verify push nightly:
	@echo "make $@: not built yet"; exit 64

bench:
	$(PYTHON) bench/bench_rebuild.py $(BENCH_ARGS)
