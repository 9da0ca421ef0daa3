# shardflow: `make demo` and `make test` work on a fresh machine with Python 3.11, make and root.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT ?= out/demo
PYTEST_ARGS ?=
# Packages are installed without byte-compiling them all (a minute saved); each module is
# compiled once, when first imported, and cached, also where PYTHONDONTWRITEBYTECODE is set.
RUN := env -u PYTHONDONTWRITEBYTECODE

.PHONY: install demo test test-fast lint format bench clean

install: $(STAMP)

# `demo` and `test` install the same: every extra of the tools (all), the tests' (test: pytest,
# ruff, mypy, MkDocs) and the readers' frameworks (PyTorch and JAX, CPU builds). Measured with
# `du -sh .venv`: 4.0 GB installed, 4.25 GB once used (modules are compiled as first imported),
# of which tensorflow 1.9 GB, torch 0.7 GB, jaxlib 0.35 GB, google 0.2 GB, pyarrow 0.15 GB.
$(STAMP): setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing shardflow and its dependencies into $(VENV) (about 4 GB: TensorFlow 1.9 GB, PyTorch and JAX 1.1 GB; a few minutes; the log is $(VENV)/install.log)"
	$(BIN)/python -m pip install --no-compile -e ".[all,test,frameworks]" > $(VENV)/install.log 2>&1 \
	  || { grep -v "is ignored: it is neither" $(VENV)/install.log | tail -40; exit 1; }
	$(BIN)/python -m pip check
	touch $(STAMP)

# Each demo step is shown as a user types it, then run from the project's .venv.
STEP = @printf '\n$$ shardflow %s\n' "$(1)" && $(RUN) $(BIN)/shardflow $(1)

demo: $(STAMP)
	$(call STEP,etl --config examples/penguins/penguins.yaml --output $(DEMO_OUT)/penguins --overwrite)
	$(call STEP,inspect $(DEMO_OUT)/penguins --split train --take 2)
	$(call STEP,train --data $(DEMO_OUT)/penguins --model-dir $(DEMO_OUT)/model --fresh)
	$(call STEP,predict --model-dir $(DEMO_OUT)/model --data $(DEMO_OUT)/penguins --split test --take 5)
	$(call STEP,predict --model-dir $(DEMO_OUT)/model --config examples/penguins/penguins.yaml --input examples/penguins/new_penguins.csv)
	@echo "dataset: $(DEMO_OUT)/penguins   model: $(DEMO_OUT)/model (export/, metrics.json, logs/)"

# ruff and mypy (settings in pyproject.toml): lint, the formatting check and the type check of
# pipelines/, transforms/, trainer/ and deploy/; `make format` rewrites.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The tests run in two processes (pytest-xdist, one per core), each test file in one process so
# that its module fixtures (an ETL or a training run) run once; the tests that assert wall-clock
# limits (marker `timed`) run first, alone. TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 2
PYTEST := $(RUN) PATH="$(CURDIR)/$(BIN):$$PATH" TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -q -p no:cacheprovider

test: lint
	$(PYTEST) -m timed $(PYTEST_ARGS) tests
	$(PYTEST) -m "not timed" -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS) tests

test-fast: $(STAMP)
	$(RUN) PATH="$(CURDIR)/$(BIN):$$PATH" TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS) tests

bench: $(STAMP)
	$(BIN)/python benchmarks/etl_csv.py --rows 200000 --repeats 3

clean:
	rm -rf $(VENV) out build *.egg-info

# The documentation site (MkDocs + Material, mkdocs.yml): built strictly into site/; docs-serve
# serves it on http://127.0.0.1:8000 and rebuilds on every change.
.PHONY: docs docs-serve
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --dev-addr 127.0.0.1:8000
