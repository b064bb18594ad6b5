# The two commands of the README, and what they need.
#   make leaderboard   set up .venv, then run the default config to results/leaderboard.html
#   make test          set up .venv, lint, then run the whole test suite (what CI runs)
#   make dvc.yaml      write dvc.yaml and params.yaml for config/config.yaml (CONFIG=config/x.yaml: laid over it)
#   make docs          the measured tables of docs/ generated from the records in docs/measurements/, docs/pipeline.md from the stage table
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
# snakemake, dvc and python from the venv (jobs run the interpreter snakemake runs under).
export PATH := $(abspath $(VENV))/bin:$(PATH)
# ...and this checkout's own code, whatever an editable install elsewhere points at.
export PYTHONPATH := $(abspath src)$(if $(PYTHONPATH),:$(PYTHONPATH))
CORES ?= all

.PHONY: setup leaderboard benchmark study test test-fast bytecode lint docs dvc.yaml lock clean
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/setup.sh
	touch $@

leaderboard: setup
	snakemake --cores $(CORES) results/leaderboard.html

# The real 93% threshold, three seeds per entry: hours on a 2-core CPU.
benchmark: setup
	snakemake results/leaderboard.html --cores $(CORES) --configfile config/benchmark.yaml

# One study (config/studies/<name>.yaml) with the default config: make study STUDY=batch-size
STUDY ?= test-batch
study: setup
	snakemake --cores $(CORES) results/studies/$(STUDY).html --config 'studies=[$(STUDY)]'

# The suite on TEST_WORKERS pytest-xdist workers, each test module (and the
# modules sharing the session's config/test.yaml run) on one of them; see
# tests/conftest.py. TEST_WORKERS=0: one process. First, src/ compiled to
# bytecode (the bytecode target): the suite starts some 1,300 Python processes
# that import dawnpipe, and where PYTHONDONTWRITEBYTECODE is set (as on some CI
# machines) each would compile the modules it imports again; the tests' copies
# of the project take the bytecode along.
TEST_WORKERS ?= 2
test: setup lint bytecode
	python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# Skips the end-to-end runs of the real tools; for quick local iterations only.
test-fast: setup bytecode
	python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder -m "not slow"

bytecode: setup
	python -m compileall -q src

# Format and lint (ruff), the import layers (.importlinter), the workflow
# (snakemake --lint), dvc.yaml against the stage table, every reference in
# code and docs to a file, module or section (scripts/refs.py), and the docs
# (links, anchors, the commands they show, the README's size, the generated
# tables and docs/pipeline.md: tests/test_docs.py); a few seconds each.
lint: setup
	ruff format --check src tests bench scripts examples
	ruff check src tests bench scripts examples
	lint-imports --no-cache
	snakemake --lint
	python -m dawnpipe pipeline dvc --check
	python scripts/refs.py
	python -m pytest -q -n 0 -p no:cacheprovider tests/test_docs.py

# The measured tables of docs/measurements.md and docs/studies.md, from the
# records the bench scripts wrote (python bench/<script>.py --record), and
# docs/pipeline.md from the stage table.
docs: setup
	python scripts/docs.py
	python -m dawnpipe pipeline docs

# DVC's view of the pipeline, written from the stage table (src/dawnpipe/pipeline/stages.py).
CONFIG ?=
dvc.yaml: setup
	python -m dawnpipe pipeline dvc $(if $(CONFIG),--config $(CONFIG))

lock: setup
	pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.body.tmp
	{ sed -n '1,3p' constraints.txt; cat constraints.body.tmp; } > constraints.new.tmp
	mv constraints.new.tmp constraints.txt && rm constraints.body.tmp

clean:
	rm -rf results .snakemake
