# nexus — build, install, run, test, benchmark, lint.
GO          ?= go
BIN         ?= bin/nexus
NEXUS_HOME  ?= $(HOME)/nexus
GOBIN_DIR   := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin
GOLANGCI    ?= $(shell command -v golangci-lint 2>/dev/null || echo $(GOBIN_DIR)/golangci-lint)
GOLANGCI_VERSION ?= v2.15.0
# make install puts nexus in $(PREFIX)/bin: by default Go's own bin directory, where
# "go install" would put it; PREFIX=/usr/local installs it for everyone (run as root).
PREFIX      ?= $(patsubst %/bin,%,$(GOBIN_DIR))

.PHONY: build install run test test-short bench lint fuzz clean pi-deps mcp-client-deps acp-client-deps acp-agents-deps nats-server web web-check

VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# The console's page is committed (internal/console/dist, checked by make web-check), so the build
# needs no npm. -trimpath and -s -w leave out the build machine's paths, the symbol table and the
# DWARF debug information: a binary of 54 MB instead of 78 MB.
build:
	@test -e $(BIN) || echo "First build of $(BIN): Go downloads the modules and compiles nexus, about 4 CPU-minutes: 2 to 3 minutes on an idle 2-core machine, 6 to 10 on a busy one."
	$(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN) ./cmd/nexus

# Copy bin/nexus to $(PREFIX)/bin/nexus, and say so if that directory is not on PATH.
install: build
	@echo "Installing $(BIN) as $(PREFIX)/bin/nexus"
	@mkdir -p $(PREFIX)/bin
	@install -m 0755 $(BIN) $(PREFIX)/bin/nexus
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; \
		*) echo "$(PREFIX)/bin is not on your PATH: add it (export PATH=\"$(PREFIX)/bin:\$$PATH\") to run nexus by name";; esac

# Build and start the gateway on the default state directory ($(NEXUS_HOME)/state), with the web
# console on loopback: it prints the console's one-time sign-in link (CONSOLE=host:port moves it).
CONSOLE     ?= 127.0.0.1:7777
run: build
	NEXUS_HOME=$(NEXUS_HOME) ./$(BIN) serve --listen $(CONSOLE)

# The whole suite, as CI runs it. The pi interoperability test needs the
# pinned pi coding agent from npm (tools/pi), the MCP-over-HTTP test the pinned
# MCP TypeScript SDK (tools/mcp-client), the nexus acp test the pinned ACP TypeScript SDK
# (tools/acp-client), the acp backends' preset tests the pinned coding agents
# (tools/acp-agents); all are installed when npm exists. The cluster's end-to-end test runs the
# real nats-server (make nats-server).
test: web pi-deps mcp-client-deps acp-client-deps acp-agents-deps nats-server
	@echo "Vetting, then testing every package with the race detector (the first run compiles everything: several minutes)."
	$(GO) vet ./...
	$(GO) test -race -shuffle=on -timeout 8m ./...

# What the suite needs beyond Go, as .ci/run installs it (root, or password-less sudo, for the
# Debian packages): openssh-server, docker.io and its private engine, zsh, fish, ripgrep, busybox,
# node, npm, curl, chromium, the real model server (tools/llm: llama-server and the tiny model),
# and the real nats-server (tools/bin).
.PHONY: test-deps
test-deps: nats-server
	bash .ci/sshd-setup.sh
	bash .ci/docker-setup.sh
	bash .ci/packages-setup.sh
	bash tools/llm/setup.sh

test-short:
	$(GO) test -short ./...

# Benchmarks; figures go to docs/BENCHMARKS.md. bench/transcript compares with pi on Node.
bench: build pi-deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x ./internal/... 
	$(GO) run ./bench/gateway
	$(GO) run ./bench/shell
	$(GO) run ./bench/transcript

# The web console's page: xterm.js and the page's code bundled by esbuild (npm ci once, then a
# build of a fraction of a second) into internal/console/dist, which the binary embeds and git
# keeps, so go build and go install need no npm. Run it after changing web/src, and commit dist.
# playwright-core comes with it for the console's browser tests.
web:
	@if command -v npm >/dev/null 2>&1; then \
		test -d web/node_modules/@xterm/xterm -a -d web/node_modules/playwright-core || { \
			echo "Installing the web console's packages into web/ (npm ci, once)"; \
			npm ci --prefix web --no-audit --no-fund --loglevel=error; }; \
		npm run --prefix web --silent build; \
	else echo "npm not found: nexus is built without its web console's page"; fi

# The committed page is byte for byte what make web builds from web/ (esbuild's output depends
# only on its input and the pinned versions). CI runs it.
web-check:
	@command -v npm >/dev/null 2>&1 || { echo "web-check needs npm"; exit 1; }
	@$(MAKE) --no-print-directory web
	@test -z "$$(git status --porcelain --untracked-files=all -- internal/console/dist)" || { \
		git status --short --untracked-files=all -- internal/console/dist; \
		echo "internal/console/dist is not what make web builds from web/: run make web and commit internal/console/dist"; exit 1; }

pi-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d tools/pi/node_modules/@mariozechner/pi-coding-agent || { \
			echo "Installing the pinned pi coding agent into tools/pi (npm ci, once; the interoperability test runs it)"; \
			npm ci --prefix tools/pi --no-audit --no-fund --loglevel=error; }; \
	else echo "npm not found: the pi interoperability test will be skipped"; fi

mcp-client-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d tools/mcp-client/node_modules/@modelcontextprotocol/sdk || { \
			echo "Installing the pinned MCP TypeScript SDK into tools/mcp-client (npm ci, once; the MCP-over-HTTP test drives the gateway with it)"; \
			npm ci --prefix tools/mcp-client --no-audit --no-fund --loglevel=error; }; \
	else echo "npm not found: the TypeScript MCP client test will be skipped"; fi

acp-client-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d tools/acp-client/node_modules/@agentclientprotocol/sdk || { \
			echo "Installing the pinned ACP TypeScript SDK into tools/acp-client (npm ci, once; the nexus acp test drives it as an editor)"; \
			npm ci --prefix tools/acp-client --no-audit --no-fund --loglevel=error; }; \
	else echo "npm not found: the nexus acp test will be skipped"; fi

acp-agents-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d tools/acp-agents/node_modules/@zed-industries/claude-agent-acp || { \
			echo "Installing the pinned coding agents into tools/acp-agents (npm install from the lock file, once; the acp backends' preset tests run them)"; \
			npm install --prefix tools/acp-agents --no-audit --no-fund --loglevel=error; }; \
	else echo "npm not found: the acp backends' preset tests will be skipped"; fi

# The real nats-server binary, pinned to the version of the module nexus embeds, in tools/bin
# (not on PATH): the cluster's end-to-end test (internal/cli/cluster_e2e_test.go) runs three.
NATS_SERVER_VERSION ?= v2.15.2
nats-server:
	@tools/bin/nats-server --version 2>/dev/null | grep -qx 'nats-server: $(NATS_SERVER_VERSION)' || { \
		echo "Installing nats-server $(NATS_SERVER_VERSION) into tools/bin (go install, once; the cluster's end-to-end test runs it)"; \
		GOBIN=$(CURDIR)/tools/bin $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION); }

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCreate -fuzztime 30s ./internal/gateway
	$(GO) test -run '^$$' -fuzz FuzzDecodeStrict -fuzztime 30s ./internal/abi
	$(GO) test -run '^$$' -fuzz FuzzParseKey -fuzztime 30s ./internal/chatstore
	$(GO) test -run '^$$' -fuzz FuzzParseLineExact -fuzztime 30s ./internal/transcript

lint:
	@test -x $(GOLANGCI) || { \
		echo "Installing golangci-lint $(GOLANGCI_VERSION) into $(GOBIN_DIR) (once; it compiles for a few minutes)"; \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); }
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...
	$(GOLANGCI) run ./...

clean:
	rm -rf bin
