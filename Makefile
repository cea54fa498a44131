# Every target creates or reuses .venv and installs what it needs, Debian packages included.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := tests/rhea/node_modules/.installed

.PHONY: run test bench lint fmt clean

$(STAMP): pyproject.toml scripts/system-deps.sh
	./scripts/system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(NODE_STAMP): tests/rhea/package.json tests/rhea/package-lock.json
	cd tests/rhea && npm ci --silent --no-audit --no-fund
	touch $@

run: $(STAMP)
	$(BIN)/python -m router.demo

test: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 -q

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) tests/rhea/node_modules bench/build
