# nexus — build, run, test, benchmark, lint.
GO          ?= go
BIN         ?= bin/nexus
NEXUS_HOME  ?= $(HOME)/nexus
GOLANGCI    ?= $(shell command -v golangci-lint 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/golangci-lint)
GOLANGCI_VERSION ?= v2.15.0

.PHONY: build run test test-short bench lint fuzz clean pi-deps

VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/nexus

# Build and start the gateway on the default state directory ($(NEXUS_HOME)/state).
run: build
	NEXUS_HOME=$(NEXUS_HOME) ./$(BIN) serve

# The whole suite, as CI runs it. The pi interoperability test needs the
# pinned pi coding agent from npm (tools/pi); it is installed when npm exists.
test: pi-deps
	$(GO) vet ./...
	$(GO) test -race -shuffle=on -timeout 8m ./...

test-short:
	$(GO) test -short ./...

# Benchmarks; figures go to docs/BENCHMARKS.md. bench/transcript compares with pi on Node.
bench: build pi-deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x ./internal/... 
	$(GO) run ./bench/gateway
	$(GO) run ./bench/shell
	$(GO) run ./bench/transcript

pi-deps:
	@if command -v npm >/dev/null 2>&1; then \
		test -d tools/pi/node_modules/@mariozechner/pi-coding-agent || npm ci --prefix tools/pi --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the pi interoperability test will be skipped"; fi

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCreate -fuzztime 30s ./internal/gateway
	$(GO) test -run '^$$' -fuzz FuzzDecodeStrict -fuzztime 30s ./internal/abi
	$(GO) test -run '^$$' -fuzz FuzzParseKey -fuzztime 30s ./internal/store
	$(GO) test -run '^$$' -fuzz FuzzParseLineExact -fuzztime 30s ./internal/transcript

lint:
	@test -x $(GOLANGCI) || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...
	$(GOLANGCI) run ./...

clean:
	rm -rf bin
