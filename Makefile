# siftbatch: `make demo` shows it working; `make test` is what CI runs.
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME   ?= 1s

.PHONY: help demo test test/race lint build examples bench fmt tidy

help: ## list the targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

demo: ## run the live demo: a fixture server, several jobs, progress bars, a summary
	$(GO) run ./cmd/siftbatch demo

test: lint test/race ## lint, then every test under the race detector

test/race: ## go test -race ./...
	$(GO) test -race -count=1 ./...

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

build: ## build the command and every example
	$(GO) build ./...

examples: ## build every example
	$(GO) build ./examples/...

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

fmt: ## gofmt -w
	gofmt -w $$(git ls-files '*.go')

tidy: ## go mod tidy
	$(GO) mod tidy
