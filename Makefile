# kubectl-triton: `make install` then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Four workers, each test file on one of them (its module fixtures and its test_zz_* summaries stay together):
# most of the suite waits on servers it started, so four beat two even on two cores (8.5 against 11 minutes).
# Tests marked `serial` (targets in milliseconds of a live server) run after, alone: beside three other workers on
# two cores they measured the machine's load, not the code.
PYTEST_ARGS ?= -n 4 --dist loadfile

.PHONY: install system-deps controlplane test lint render bench fuzz realworld dist init-data clean

install: system-deps $(BIN)/kubectl-triton

# Debian packages the tests run (CI is root on Debian): `prometheus` (prometheus and promtool: the Prometheus
# end-to-end test and the promtool unit tests of base/monitoring/tests), mpirun (openmpi-bin) and `ip netns`
# (iproute2) for the multi-node bootstrap test, ssh-keygen (openssh-client) for its key, docker-registry (the CNCF
# distribution registry) served on loopback for the OCI model artifact test. A no-op when every command
# is on PATH; else apt-get, as root or through sudo. Where that fails the tests that need them skip, except under
# KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (.ci/run), where this step fails.
SYSTEM_DEPS := prometheus:prometheus promtool:prometheus mpirun:openmpi-bin ip:iproute2 ssh-keygen:openssh-client \
	docker-registry:docker-registry
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do command -v $${dep%%:*} >/dev/null 2>&1 || missing="$$missing $${dep#*:}"; \
	done; [ -z "$$missing" ] && exit 0; \
	missing=$$(echo $$missing | tr ' ' '\n' | sort -u | tr '\n' ' '); echo "installing Debian packages: $$missing"; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	if command -v apt-get >/dev/null 2>&1 && $$sudo apt-get update -qq && \
	   $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; then \
	  exit 0; \
	fi; \
	echo "warning: could not install $$missing; the tests that need them skip (they fail in CI)"; \
	[ "$$KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS" != 1 ]

# The real Kubernetes control plane the tests start on loopback (etcd 3.6, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl 1.35, kwok, Flux's source-, kustomize- and helm-controller), built from the Go module
# proxy through the wrapper go.mod files of hack/controlplane/ and cached under ~/.cache/kubectl-triton/controlplane
# (a cold build took 33 minutes on 2 cores from an empty Go module cache, a cached run 0.06 s). Needs Go >= 1.26.
controlplane:
	bash hack/controlplane/build.sh

$(BIN)/kubectl-triton: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@
	@echo "installed: $(BIN)/kubectl-triton (add $(abspath $(BIN)) to PATH for 'kubectl triton')"

# pytest exits 5 when it collects no test: that is a failure here too, so no special case is needed.
test: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest $(PYTEST_ARGS) -m "not serial"
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -p no:xdist -m serial

lint: install
	$(BIN)/ruff check kubectl_triton tests bench tools
	$(BIN)/mypy

render: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/kubectl-triton render --all

bench: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python bench/run.py

# Property-based tests with many more examples than `make test` runs.
fuzz: install
	KUBECTL_TRITON_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest -q tests -k fuzz -p no:cacheprovider

# The static checks against the real tritonserver on every real model repository of
# ../shared/conformance/realworld-configs (or $KUBECTL_TRITON_REALWORLD_CORPUS; tools/realworld_corpus.py builds it
# from tests/fixtures/realworld-sources.json) and up to four single-point mutations of each (`make test` runs one
# small repository of each of 16 projects with two mutations each, about 50 s); about 8 minutes on 2 cores.
realworld: install
	KUBECTL_TRITON_REALWORLD=all PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q \
	  tests/test_conformance_realworld.py -p no:cacheprovider

# dist/kubectl-triton: one executable file for krew and GitHub releases that runs on every CPython minor version in
# DIST_PYTHONS found on PATH (tools/zipapp.py: the pure-Python part once, compiled wheels per version, a stdlib
# launcher that picks the running interpreter's). First run unpacks into ~/.cache/kubectl-triton (KUBECTL_TRITON_ROOT).
# It says which versions it built for and which interpreters it could not use (and how to get them); a missing one
# is a warning, and fails the build under KUBECTL_TRITON_REQUIRE_SYSTEM_DEPS=1 (CI), as for system-deps.
DIST_PYTHONS ?= python3.10 python3.11 python3.12 python3.13
# Left out of the file (4 x 30 MB of compiled wheels): what only bench and tune use (numpy, grpcio and tritonclient's
# numeric deps); those commands then say in one line to install with pipx.
DIST_EXCLUDE ?= numpy ml_dtypes grpcio python_rapidjson
dist: install
	rm -rf build dist/kubectl-triton dist/kubectl-triton.sha256 dist/*.whl
	mkdir -p dist
	$(BIN)/python -m pip wheel --quiet --no-deps -w dist .
	rm -rf build
	$(BIN)/python tools/zipapp.py --wheel dist/kubectl_triton-*.whl \
	  $(foreach py,$(DIST_PYTHONS),-p $(py)) $(foreach d,$(DIST_EXCLUDE),--exclude $(d)) -o dist/kubectl-triton
	$(BIN)/python -c 'import hashlib; print(hashlib.sha256(open("dist/kubectl-triton", "rb").read()).hexdigest(), \
	  " kubectl-triton")' > dist/kubectl-triton.sha256
	@echo "built: dist/kubectl-triton ($$(du -h dist/kubectl-triton | cut -f1))"

# `kubectl triton init` writes base/, the shared overlay Components and a new cluster's infrastructure from
# kubectl_triton/data/init/; tests/test_init.py fails while this repository's copies differ. After editing the
# repository's copies, this target puts them into the package data.
init-data:
	rm -rf kubectl_triton/data/init/base kubectl_triton/data/init/overlays kubectl_triton/data/init/infrastructure
	cp -a base kubectl_triton/data/init/base
	mkdir -p kubectl_triton/data/init/overlays kubectl_triton/data/init/infrastructure
	cp -a overlays/artifacts overlays/autoscaling kubectl_triton/data/init/overlays/
	cp clusters/production/infrastructure/*.yaml kubectl_triton/data/init/infrastructure/

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
