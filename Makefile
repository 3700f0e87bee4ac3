# robolearn: `make demo` and `make test` each do their own set-up (idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.robolearn-installed
# Offscreen MuJoCo rendering on CPU-only machines; override with MUJOCO_GL=osmesa.
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= $(MUJOCO_GL)

.PHONY: setup setup-bench demo test test-slow clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@bash scripts/install_system_deps.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first: the CPU build 2.13.0 satisfies the project's range, so nothing pulls CUDA.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

setup-bench: $(VENV)/.robolearn-bench-installed

$(VENV)/.robolearn-bench-installed: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench,export,vlm,ray]'
	@touch $@

demo: setup
	$(BIN)/robolearn train launch/demo_arm_reach.toml --out runs/demo --overwrite

# the suite covers the SB3 comparison, the CLIP reward and the Ray engine too, so it installs those extras
test: setup-bench
	$(BIN)/python -m pytest -q

test-slow: setup-bench
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) runs .pytest_cache
