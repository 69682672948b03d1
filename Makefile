# siftbatch: `make demo` shows it working; `make test` is what CI runs.
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME   ?= 1s

.PHONY: help demo install readme test test/race lint build examples bench bench/rss bench/profile fmt tidy

help: ## list the targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

demo: ## run the live demo: a fixture server, several jobs, progress bars, a summary
	$(GO) run ./cmd/siftbatch demo

install: ## go install ./cmd/siftbatch: the siftbatch command in $(go env GOPATH)/bin
	$(GO) install ./cmd/siftbatch

readme: ## run the README's session (the test that extracts it): curl and python3 needed
	$(GO) test -run '^TestREADME_Session$$' -count=1 -v ./cmd/siftbatch

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

# make bench: the figures of docs/PERFORMANCE.md (issue 4), each benchmark
# -count=$(BENCHCOUNT), medians by benchstat; about 6 minutes on 2 cores.
# Raw results stay in $(BENCHDIR)/. The heavy ones (a whole store swept, 10,000
# jobs, a process's peak RSS) are one op per run: -benchtime 1x.
BENCHDIR   ?= bench.out
BENCHCOUNT ?= 5
BENCHSTAT  ?= $(GO) run golang.org/x/perf/cmd/benchstat@latest
BENCHTEST   = $(GO) test -run '^$$' -count $(BENCHCOUNT)

bench: ## run every benchmark (-count=5) and print the medians (benchstat)
	@mkdir -p $(BENCHDIR)
	@echo "machine: $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $$($(GO) env GOVERSION); commit $$(git rev-parse --short HEAD 2>/dev/null || echo '?'); load $$(cut -d' ' -f1-3 /proc/loadavg)" | tee $(BENCHDIR)/machine.txt
	$(BENCHTEST) -bench '^(BenchmarkStore_RawTxn|BenchmarkRunner_Throughput|BenchmarkRunner_Scaling|BenchmarkRunner_Fairness)$$' -benchmem -benchtime $(BENCHTIME) ./engine | tee $(BENCHDIR)/engine.txt; grep -q '^ok' $(BENCHDIR)/engine.txt
	$(BENCHTEST) -bench '^BenchmarkSupervisor_Dispatch$$' -benchtime $(BENCHTIME) ./actors | tee $(BENCHDIR)/actors.txt; grep -q '^ok' $(BENCHDIR)/actors.txt
	$(BENCHTEST) -bench '^BenchmarkSupervisor_LiveJobMemory$$' -benchtime 1x ./actors | tee $(BENCHDIR)/actors-memory.txt; grep -q '^ok' $(BENCHDIR)/actors-memory.txt
	$(BENCHTEST) -bench '^BenchmarkStore_Delete$$' -benchtime 1x ./persistence | tee $(BENCHDIR)/persistence.txt; grep -q '^ok' $(BENCHDIR)/persistence.txt
	@$(MAKE) --no-print-directory bench/rss
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $(BENCHDIR)/machine.txt
	@cat $(BENCHDIR)/engine.txt $(BENCHDIR)/actors.txt $(BENCHDIR)/actors-memory.txt $(BENCHDIR)/persistence.txt $(BENCHDIR)/rss.txt > $(BENCHDIR)/all.txt
	@echo; echo "== medians of $(BENCHCOUNT) runs"; $(BENCHSTAT) $(BENCHDIR)/all.txt
	@echo "== Submit and Status, 100k stored vs 1k (target: within 1.5x, i.e. at most +50%)"; $(BENCHSTAT) -filter '.name:Runner_Scaling' -col /stored $(BENCHDIR)/all.txt
	@echo "== dispatch, 10,000 live jobs vs 10 (target: within 2x, i.e. at most +100%)"; $(BENCHSTAT) -filter '.name:Supervisor_Dispatch' -col /live $(BENCHDIR)/all.txt
	@cat $(BENCHDIR)/machine.txt

bench/rss: ## peak RSS (/usr/bin/time -v) of the demo and of a runner that ran 1,000 jobs x 32 targets
	@test -x /usr/bin/time || { echo "bench/rss needs /usr/bin/time: apt-get install time"; exit 1; }
	@mkdir -p $(BENCHDIR)
	$(GO) build -o $(BENCHDIR)/siftbatch ./cmd/siftbatch
	$(GO) test -c -o $(BENCHDIR)/engine.test ./engine
	@printf 'pkg: process\n' > $(BENCHDIR)/rss.txt
	@for i in $$(seq $(BENCHCOUNT)); do \
		/usr/bin/time -v $(BENCHDIR)/siftbatch demo > /dev/null 2> $(BENCHDIR)/time.txt || { cat $(BENCHDIR)/time.txt; exit 1; }; \
		awk -F: '/Maximum resident set size/ { printf "BenchmarkProcess_PeakRSS/demo 1 %.1f maxRSS-MiB\n", $$2 / 1024 }' $(BENCHDIR)/time.txt | tee -a $(BENCHDIR)/rss.txt; \
	done
	@printf 'pkg: github.com/sift/batch/engine\n' >> $(BENCHDIR)/rss.txt
	@for i in $$(seq $(BENCHCOUNT)); do \
		/usr/bin/time -v $(BENCHDIR)/engine.test -test.run '^$$' -test.bench '^BenchmarkRunner_PeakRSS$$' -test.benchtime 1x > $(BENCHDIR)/run.txt 2> $(BENCHDIR)/time.txt || { cat $(BENCHDIR)/run.txt $(BENCHDIR)/time.txt; exit 1; }; \
		grep '^BenchmarkRunner_PeakRSS' $(BENCHDIR)/run.txt | tee -a $(BENCHDIR)/rss.txt; \
		awk -F: '/Maximum resident set size/ { printf "BenchmarkProcess_PeakRSS/runner=1000x32 1 %.1f maxRSS-MiB\n", $$2 / 1024 }' $(BENCHDIR)/time.txt | tee -a $(BENCHDIR)/rss.txt; \
	done

bench/profile: ## CPU profile of the hottest path (throughput, 1 worker, as in bench): pprof -top
	@mkdir -p $(BENCHDIR)
	$(GO) test -run '^$$' -bench '^BenchmarkRunner_Throughput$$/^workers=1$$' -count $(BENCHCOUNT) -benchtime $(BENCHTIME) -cpuprofile $(BENCHDIR)/cpu.prof -o $(BENCHDIR)/engine.test ./engine
	$(GO) tool pprof -top -nodecount 40 $(BENCHDIR)/engine.test $(BENCHDIR)/cpu.prof

fmt: ## gofmt -w
	gofmt -w $$(git ls-files '*.go')

tidy: ## go mod tidy
	$(GO) mod tidy

# Reliability (docs/RELIABILITY.md). make test runs the fuzz seeds, the crash
# test and a 2.5s load test; these run the long versions.
FUZZTIME     ?= 60s
LOAD_SECONDS ?= 20
SOAK_JOBS    ?= 100000

.PHONY: fuzz load soak

fuzz: ## run every fuzz target of every package for FUZZTIME each (default 60s)
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

load: ## the load test for LOAD_SECONDS (default 20s), under -race
	LOAD_SECONDS=$(LOAD_SECONDS) $(GO) test -race -count=1 -run '^TestRunner_Load$$' -v ./engine

soak: ## SOAK_JOBS (100,000) jobs through one runner: RSS and disk over time (not in make test)
	SOAK_JOBS=$(SOAK_JOBS) $(GO) test -count=1 -run '^TestRunner_Soak$$' -timeout 60m -v ./engine
