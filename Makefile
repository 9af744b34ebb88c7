# Entry points. Every target installs the project into .venv first (again only when
# pyproject.toml changes), so a machine with Python 3.11 and pip needs nothing else.

PYTHON   ?= python3.11
VENV     := .venv
STAMP    := $(VENV)/.installed
WORKERS  ?= auto

# cocotb reads WAVES from the environment too; waveforms are asked for through the
# command line only, so a build made without tracing is never run with it.
SIM_FLAGS = $(if $(filter 1 yes true,$(WAVES)),--waves) $(if $(CONFIG),--config $(CONFIG))
unexport WAVES

# Bytecode caches (ours and pytest's rewritten test modules) save every worker seconds
# of compiling on each run; a shell that turns them off would pay that on every run.
export PYTHONDONTWRITEBYTECODE :=

BOARD    ?= ulx3s
# the chip of `make sim` and `make bitstream`: a preset's name or a chip file
# (docs/chip.md, "Chip files"); default: tiny, or the board's
CONFIG   ?=
PNR_SEED ?=
# The FPGA tools (yowasp WebAssembly builds), board definitions and SMT solvers:
# `bitstream` needs them, and `make test` for its synthesis check and the formal
# proofs (`make test-fast` never does).
FPGA_STAMP := $(VENV)/.installed-fpga

.PHONY: venv sim test test-fast regress bench bitstream clean distclean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -e '.[dev]'
	touch $@

sim: $(STAMP)
	$(VENV)/bin/systolica sim $(SIM_FLAGS)

# The chip models' C++ at -O1 (SYSTOLICA_OPT_FAST): half the compile of -O3 for short runs.
# Work stealing: the tests' durations range from milliseconds to minutes (chip builds).
test: $(FPGA_STAMP)
	$(VENV)/bin/ruff check .
	SYSTOLICA_OPT_FAST=-O1 $(VENV)/bin/python -m pytest -n $(WORKERS) --dist worksteal -m "not regress" --durations=25 testbenches

# The lint (ruff, its rules in pyproject.toml), then the quick pure-Python tests (no
# Verilator build or run, no FPGA tool, none marked slow: those run in `make test`;
# property tests draw a quarter of their examples, `testbenches/tiers.py`), shuffled
# across modules on every run so that no test can lean on another having run first;
# the seed is printed, and `make test-fast SEED=n` repeats that order.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	SYSTOLICA_TIER=fast $(VENV)/bin/python -m pytest -q -n 2 --dist worksteal -m "not rtl and not fpga and not slow and not regress" \
		--random-order-bucket=global $(if $(SEED),--random-order-seed=$(SEED)) testbenches

regress: $(FPGA_STAMP)
	$(VENV)/bin/python -m pytest -n $(WORKERS) -m regress testbenches

bench: $(STAMP)
	mkdir -p build
	$(VENV)/bin/systolica bench --out build/bench.json

$(FPGA_STAMP): $(STAMP)
	$(VENV)/bin/pip install -e '.[dev,fpga]'
	touch $@

# The bitstream, the place-and-route log and report.json in build/fpga/$(BOARD)/;
# PNR_SEED=n seeds nextpnr's placer (placements of one netlist spread by some MHz).
bitstream: $(FPGA_STAMP)
	$(VENV)/bin/python -m systolica.app.bitstream --board $(BOARD) $(if $(CONFIG),--config $(CONFIG)) $(if $(PNR_SEED),--seed $(PNR_SEED))

clean:
	rm -rf build sim_build .pytest_cache
	find . -name __pycache__ -type d -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
