# tf-cluster — the verbs. Every target installs what it needs (make setup).
SHELL := /bin/bash
VENV  := .venv
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(CURDIR)/$(VENV)/bin:$(PATH)
PY    := $(VENV)/bin/python
EXAMPLE ?= values-examples/mwms-cpu.yaml
PYTEST_ARGS ?=
# Each step records how long it took when $$TF_CLUSTER_TIMINGS names a file (make check sets it and
# prints the table at the end: tooling/timings.py); otherwise it only runs the step.
TIME  := python3 tooling/timings.py run

.PHONY: help setup setup-demo check check-all test lint golden test-image image notebook-image standin-image kind-node-image kind-smoke e2e-api e2e-bins e2e-images e2e e2e-soak e2e-up e2e-down e2e-status demo render tiers docs site bench bench-sim package publish release clean
.DEFAULT_GOAL := help

help:  ## this list of targets
	@echo "tf-cluster: make <target>   (every target installs what it needs)"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup:  ## venv with pinned deps + pinned helm 4, helm 3, kubectl, the linters and test tools in .tools/bin
	@$(TIME) setup -- python3 tooling/bootstrap.py

setup-demo:  ## only what `make demo` needs: the venv with tf-cluster and TensorFlow CPU (Helm 4: PATH, else fetched on first use)
	@$(TIME) setup -- python3 tooling/bootstrap.py demo

# The kube-apiserver suite runs the oldest Kubernetes the chart supports (kubeVersion >=1.29); the
# real node the newest: hack/node/k8s-version, its one source (hack/node/config.py and the build scripts
# read it too; the kind node image is the same version).
K8S_API_VERSION ?= 1.29.15
NODE_K8S_VERSION := $(shell cat hack/node/k8s-version)
K8S_BIN ?= $(HOME)/.cache/tf-cluster/k8s-$(K8S_API_VERSION)
export TF_CLUSTER_K8S_BIN := $(K8S_BIN)
export K8S_VERSION := $(K8S_API_VERSION)

MARK ?=
# make test's pytest processes (pytest-xdist): one per core by default, each test module whole on one
# of them (--dist loadfile: a module's fixtures, e.g. test_apiserver.py's kube-apiserver, start once).
# Alone, one process left half of two cores idle (a warm `make check`: 950 s; two: 537 s). TEST_JOBS=0: one process.
TEST_JOBS ?= auto
test: setup lint e2e-bins  ## lint, then the whole suite (a process per core): chart (Helm 4 and 3), launcher, real TensorFlow, real kube-apiserver
	$(TIME) pytest -- $(PY) -m pytest tests --ignore=tests/image -rs -m "$(MARK)" -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

lint:  ## ruff (lint + format check), mypy and yamllint from their own small venv, .venv-lint (no TensorFlow, no Go builds); the commit messages since the last release
	$(TIME) lint -- bash tooling/lint.sh

golden: setup  ## re-render tests/golden (every example, tests/golden/cases, defaults): whole renders + per-template snapshots
	$(PY) tests/golden/update.py

check:  ## what CI runs: `make test`, then the real-node scenarios (`make e2e`), without the extended ones; the node's builds run beside `make test`; ends with a timing table
	@bash tooling/check.sh $(NODE_K8S_VERSION) "not extended"

check-all:  ## every test: `make test` (kube-apiserver 1.29), the same API suite on $(NODE_K8S_VERSION), `make e2e` with the extended scenarios, `make kind-smoke`
	$(MAKE) test
	$(MAKE) e2e-api K8S_API_VERSION=$(NODE_K8S_VERSION)
	$(MAKE) e2e
	$(MAKE) kind-smoke

e2e-bins:  ## kube-apiserver $(K8S_API_VERSION) built from the Kubernetes Go modules (cached; ~5 min cold) + Debian's etcd and promtool
	@$(TIME) kube-apiserver -- bash hack/apiserver/build.sh $(K8S_BIN)

e2e-api: setup e2e-bins  ## only the kube-apiserver suite: install/upgrade/uninstall, RBAC, launcher API path
	$(PY) -m pytest tests/e2e/test_apiserver.py -rs $(PYTEST_ARGS)

NODE := $(PY) hack/node
KEEP ?=
# 2: the multi-node scenarios beside the single-node ones, then those that need the cluster alone
# (tests/e2e/lanes.py); 1: one module after another
E2E_LANES ?= 2
e2e-up: image  ## a real three-node Kubernetes here (this host + two network-namespace nodes; kube-* from the Go modules, containerd, Cilium, CoreDNS, Argo CD); idempotent
	$(NODE) up

e2e-down:  ## stop the nodes, remove its pods and state (built binaries and imported images are kept)
	$(NODE) down

e2e-status:  ## are the e2e nodes up, and what runs on it
	$(NODE) status

e2e-images: setup  ## the image builder (Debian's podman/buildah), then the trainer image and the stand-ins of the official ones
	@$(TIME) image-builder -- bash images/base/install-builder.sh
	@$(MAKE) --no-print-directory standin-image

e2e: setup  ## build the trainer image, the stand-ins of the official images and the node's binaries side by side, bring the node (+ Argo CD) up or reuse it, run the cluster and Argo CD scenarios, take it down unless KEEP=1
	@$(TIME) image-builder -- bash images/base/install-builder.sh  # its apt-get first: the node's build installs Debian packages too
	@# the image build waits mostly on downloads, the node's Go builds on the CPU: both at once
	@$(TIME) node-build -- $(NODE) build & b=$$!; $(TIME) images -- $(MAKE) --no-print-directory standin-image; i=$$?; wait $$b; n=$$?; \
	  [ $$i = 0 ] || exit $$i; [ $$n = 0 ] || exit $$n
	$(TIME) node-up -- $(NODE) up && TF_CLUSTER_E2E_KUBECONFIG=$$($(NODE) env | cut -d= -f2) \
	  $(TIME) pytest -- $(PY) tests/e2e/lanes.py --lanes $(E2E_LANES) -m "$(MARK)" $(PYTEST_ARGS); \
	  rc=$$?; if [ -z "$(KEEP)" ]; then $(TIME) node-down -- $(NODE) down; fi; exit $$rc

N ?= 3
e2e-soak: setup  ## the e2e suite N times (N=3) on one cluster, brought up once: each scenario's pass rate and time spread, into docs/development/e2e-soak.md; the node is taken down unless KEEP=1
	@bash images/base/install-builder.sh
	@$(NODE) build & b=$$!; $(MAKE) --no-print-directory standin-image; i=$$?; wait $$b; n=$$?; \
	  [ $$i = 0 ] || exit $$i; [ $$n = 0 ] || exit $$n
	$(NODE) up && $(PY) tests/soak.py --runs $(N) --kubeconfig $$($(NODE) env | cut -d= -f2) --lanes $(E2E_LANES) --mark "$(or $(MARK),not extended)"; \
	  rc=$$?; if [ -z "$(KEEP)" ]; then $(NODE) down; fi; exit $$rc

BASE ?= localhost/tf-cluster-base:bookworm
image: setup  ## build the CPU trainer image; without a registry, make the Debian base locally first
	@bash images/base/install-builder.sh
	@if [ "$(BASE)" = "localhost/tf-cluster-base:bookworm" ]; then bash images/base/make-base.sh podman $(BASE); fi
	$(VENV)/bin/tf-cluster build --variant cpu --base $(BASE)

# the kind node's Kubernetes: the e2e node's (NODE_K8S_VERSION, above)
kind-node-image:  ## a kind v0.33.0 node image for Kubernetes $(NODE_K8S_VERSION) made here, no registry (hack/kind/; cached, ~3 min cold)
	@K8S_VERSION=$(NODE_K8S_VERSION) bash hack/kind/build-node-image.sh

RUNS ?= 1
kind-smoke: image  ## `tf-cluster smoke --kind` from no cluster to a deleted one, via kind's podman provider (root; RUNS=3)
	RUNS=$(RUNS) K8S_VERSION=$(NODE_K8S_VERSION) bash hack/kind/smoke.sh

standin-image: image  ## the node's stand-ins for the chart's default images, TensorFlow's official one and its -jupyter (no registry here), and the pods' package index
	$(NODE) standin

notebook-image: image  ## the notebook image: the CPU trainer + JupyterLab + the example notebooks (charts/tf-cluster/files/notebooks/)
	$(VENV)/bin/tf-cluster build --variant cpu --notebook --base $(BASE)

test-image: image  ## run the example in containers from the built image
	$(PY) -m pytest tests/image -rs $(PYTEST_ARGS)

demo: setup-demo  ## run the default example on this machine with real TensorFlow (no Kubernetes)
	$(VENV)/bin/tf-cluster run-local -f $(EXAMPLE)

render: setup  ## print every pod's TF_CONFIG for EXAMPLE
	$(VENV)/bin/tf-cluster render -f $(EXAMPLE) --tf-config

tiers: setup  ## regenerate docs/test-tiers.md: which tests .ci/run runs and which only make check-all (from pytest's collection)
	$(PY) tests/tiers.py

docs: setup  ## regenerate charts/tf-cluster/README.md and values.schema.json's descriptions from the values' `# --` comments
	$(TOOLS)/helm-docs --chart-search-root charts --template-files README.md.gotmpl
	$(PY) hack/schema_docs.py

site:  ## build the docs site (MkDocs Material, strict: a broken link or anchor fails) into site/
	python3 tests/docs_site.py

wheel: setup-demo  ## the installable tool: dist/tf_cluster-<version>-py3-none-any.whl (chart, trainers, pins inside; `pipx install` it)
	$(PY) -m pip wheel --disable-pip-version-check -q --no-deps . -w dist
	@ls dist/tf_cluster-*.whl

KEY ?=
KEYRING ?=
package: setup  ## the chart as a reproducible build/package/tf-cluster-<version>.tgz (KEY=name KEYRING=secring.gpg signs it)
	$(VENV)/bin/tf-cluster package $(if $(KEY),--key "$(KEY)" --keyring "$(KEYRING)")

REGISTRY ?=
release: setup  ## record the committed chart version as released (charts/releases.yaml) and tag it
	$(VENV)/bin/tf-cluster release

publish: package  ## push the package (and .prov) to REGISTRY=oci://host/path (PLAIN_HTTP=1 for a local registry)
	@test -n "$(REGISTRY)" || { echo "make publish REGISTRY=oci://<registry>/<path>"; exit 2; }
	$(VENV)/bin/tf-cluster publish $(REGISTRY) $(if $(PLAIN_HTTP),--plain-http)

BENCH_RUNS ?= 3
bench: image  ## measure and write docs/benchmarks.md (+ PNGs): scale, run-local overhead, images, then on the real node (brought up, taken down unless KEEP=1) install to first step and threads
	cd tests/bench && ../../$(PY) bench_render.py --runs $(BENCH_RUNS)
	cd tests/bench && ../../$(PY) bench_ceiling.py
	cd tests/bench && ../../$(PY) bench_demo.py --runs $(BENCH_RUNS)
	cd tests/bench && ../../$(PY) bench_images.py
	$(NODE) up && kc=$$($(NODE) env | cut -d= -f2) && (cd tests/bench && ../../$(PY) bench_node.py --runs $(BENCH_RUNS) --kubeconfig $$kc); \
	  rc=$$?; if [ -z "$(KEEP)" ]; then $(NODE) down; fi; exit $$rc
	$(MAKE) bench-sim
	cd tests/bench && ../../$(PY) report.py

bench-sim: setup  ## thousands of tasks on a simulated cluster (kwok's nodes, the real control plane and CoreDNS): starts of 64/512/4096 tasks, gang on and off, the bare-pod floor, what the launchers ask of the API and DNS in fixed windows (~4-5 h, in parts: MINUTES=90 measures what fits and keeps the rest for the next run; BESIDE=3 launchers' runs at once), and the Events they record during a start
	bash hack/node/build.sh kube-apiserver kube-controller-manager kube-scheduler coredns etcd kwok
	cd tests/bench && ../../$(PY) reaped.py ../../$(PY) bench_sim.py $(if $(MINUTES),--minutes $(MINUTES)) $(if $(BESIDE),--beside $(BESIDE))
	cd tests/bench && ../../$(PY) bench_sim_events.py

clean:  ## remove the venv, the pinned tools, build/ and runs/ (caches in ~/.cache stay)
	rm -rf $(VENV) .venv-lint .tools build runs dist
