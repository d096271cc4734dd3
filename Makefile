# gapless — two commands on a fresh machine: `make demo` and `make test`.
# Every target installs what it needs; a second run reuses what the first fetched.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration lint bench up down status clean deploy-tools alert-tools \
	image image-test containers-test fault-proxy tracing-backend docs-picture console-assets browser-tools

# Offline validators of infra/deploy (the Helm chart), built once with `go install` into
# the local state directory; a version stamp makes a second run a no-op and a new
# version a rebuild. The tests run `make deploy-tools` themselves, so this is the one
# place the versions live.
LOCAL              := $(or $(GAPLESS_LOCAL_DIR),$(CURDIR)/.local)
TOOLS              := $(LOCAL)/bin
HELM_VERSION        := v3.22.0
KUBECONFORM_VERSION := v0.8.0
# The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule), for validating the
# chart's ServiceMonitor and the alert rules; fetched as a Go module, its example CRDs
# copied out.
PROMETHEUS_OPERATOR := github.com/prometheus-operator/prometheus-operator
PROMETHEUS_OPERATOR_VERSION := v0.85.0
CRDS               := $(LOCAL)/deploy-crds

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP) console-assets
	$(BIN)/gapless demo

test: $(STAMP) deploy-tools fault-proxy alert-tools tracing-backend console-assets browser-tools
	$(BIN)/gapless up
	$(BIN)/pytest -q --durations=40

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check schemas db producers processors infra tests
	$(BIN)/ruff format --check schemas db producers processors infra tests
	$(BIN)/mypy

# The one container image (podman, buildah, mmdebstrap … from Debian's packages when
# missing; the base is built once and reused; podman's configuration under .local/).
image: $(STAMP)
	$(BIN)/gapless image build

# The demo through the image's containers; `make test` runs it with the rest.
image-test: $(STAMP)
	$(BIN)/gapless up
	$(BIN)/pytest -q tests/e2e/test_image.py

# The test fixtures' services as containers through testcontainers, on podman's socket
# (images built here, reused while their inputs are unchanged); `make test` runs it too.
containers-test: $(STAMP)
	$(BIN)/pytest -q tests/e2e/test_testcontainers.py

bench: $(STAMP)
	$(BIN)/gapless bench

up: $(STAMP)
	$(BIN)/gapless up

down: $(STAMP)
	$(BIN)/gapless down

status: $(STAMP)
	$(BIN)/gapless status

# toxiproxy for the network-fault tests: infra/local/toxiproxy.py pins its version and
# builds it with `go install` once (a second run finds it and does nothing).
fault-proxy: $(STAMP)
	$(BIN)/python -m infra.local.toxiproxy

# Jaeger for the tracing test (tests/e2e/test_tracing.py): infra/local/jaeger.py pins its
# version and builds it once from its Go module into .local/bin/jaeger (about 6 minutes
# the first time; a second run finds it and does nothing).
tracing-backend: $(STAMP)
	$(BIN)/python -m infra.local.jaeger

# htmx for the console's tables refreshing in place: infra/local/console_assets.py pins
# its version and SHA-512 and fetches it with `npm pack` into .local/console-assets
# (never committed; a second run finds it and does nothing).
console-assets: $(STAMP)
	$(BIN)/python -m infra.local.console_assets

# Chromium and chromedriver for the console's browser tests: Debian's chromium and
# chromium-driver packages, installed with apt-get when missing (infra/local/browser.py).
browser-tools: $(STAMP)
	$(BIN)/python -m infra.local.browser

# promtool, to check the alert rules and run their unit tests: Debian's prometheus
# package, installed with apt-get when missing (infra/local/promtool.py).
alert-tools: $(STAMP)
	$(BIN)/python -m infra.local.promtool

deploy-tools: $(TOOLS)/.helm-$(HELM_VERSION) $(TOOLS)/.kubeconform-$(KUBECONFORM_VERSION) \
	$(CRDS)/.prometheus-operator-$(PROMETHEUS_OPERATOR_VERSION)

$(TOOLS)/.helm-$(HELM_VERSION):
	@mkdir -p $(TOOLS)
	@echo "deploy-tools: building helm $(HELM_VERSION) with go install (one time, about 4 minutes)"
	GOBIN=$(abspath $(TOOLS)) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@touch $@

$(TOOLS)/.kubeconform-$(KUBECONFORM_VERSION):
	@mkdir -p $(TOOLS)
	@echo "deploy-tools: building kubeconform $(KUBECONFORM_VERSION) with go install (one time)"
	GOBIN=$(abspath $(TOOLS)) go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)
	@touch $@

$(CRDS)/.prometheus-operator-$(PROMETHEUS_OPERATOR_VERSION):
	@mkdir -p $(CRDS)
	dir=$$(go mod download -json $(PROMETHEUS_OPERATOR)@$(PROMETHEUS_OPERATOR_VERSION) \
	  | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && test -n "$$dir" && \
	for kind in servicemonitors prometheusrules; do \
	  install -m 0644 $$dir/example/prometheus-operator-crd/monitoring.coreos.com_$$kind.yaml $(CRDS)/; \
	done
	@touch $@

# The picture of the processes, databases and topics (README), from its Graphviz source;
# the image is committed, so only whoever changes the source needs Graphviz
# (Debian's graphviz package).
docs-picture: docs/architecture.svg

docs/architecture.svg: docs/architecture.dot
	@command -v dot >/dev/null || { echo "docs-picture needs Graphviz: apt-get install graphviz" >&2; exit 1; }
	dot -Tsvg $< -o $@

clean: down
	rm -rf .local
