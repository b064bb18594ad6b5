# The two commands of the README, and what they need.
#   make leaderboard   set up .venv, then run the default config to results/leaderboard.html
#   make test          set up .venv, then run the whole test suite (what CI runs)
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
# Rules call `python -m dawnpipe`, so the venv must come first on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)
CORES ?= all

.PHONY: setup leaderboard benchmark test test-fast lint lock clean
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml scripts/setup.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/setup.sh
	touch $@

leaderboard: setup
	snakemake --cores $(CORES) results/leaderboard.html

# The real 93% threshold, three seeds per entry: hours on a 2-core CPU.
benchmark: setup
	snakemake results/leaderboard.html --cores $(CORES) --configfile config/benchmark.yaml

test: setup
	python -m pytest

# Skips the end-to-end runs of the real tools; for quick local iterations only.
test-fast: setup
	python -m pytest -m "not slow"

lint: setup
	snakemake --lint

lock: setup
	pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.body.tmp
	{ sed -n '1,3p' constraints.txt; cat constraints.body.tmp; } > constraints.new.tmp
	mv constraints.new.tmp constraints.txt && rm constraints.body.tmp

clean:
	rm -rf results .snakemake
