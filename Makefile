# siftbatch: `make demo` shows it working; `make test` is what CI runs.
# The test tiers (their budgets: README.md, Make targets): test/short (no
# race, -short: the long multi-process tests skip), test (lint and every
# test under -race, at once; CI), and tiers of their own for what needs
# more than Go (test/browser: Chromium; test/node: Node >= 18 and npm;
# test/codegen: oapi-codegen from the module proxy), each run once by CI.
# A test joins a tier with testkit.RequireTier(t, "NAME"), or skips under
# -short with testkit.Long(t).
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME   ?= 1s

.PHONY: help demo demo-ui demo-cluster bin/siftbatch install readme test test/short test/race test/browser test/node test/codegen test/faults test/stress lint doclinks build build-k8s proto bench bench/rss bench/reads bench/poll bench/boundaries bench/reads-summary bench/profile fmt tidy

help: ## list the targets
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

# The demos build bin/siftbatch (ignored by git) and run it, not go run:
# make runs the program itself, whose Ctrl-C is a clean stop (exit 0), so
# no "make: *** Error 1" follows it (make, interrupted too, exits 130 as
# any interrupted make does, and says nothing).
bin/siftbatch: ## build the command into bin/siftbatch (what the demos run)
	$(GO) build -o bin/siftbatch ./cmd/siftbatch

demo: bin/siftbatch ## run the live demo: a fixture server, several jobs, progress bars, a summary
	bin/siftbatch demo

demo-ui: bin/siftbatch ## the live demo with the dashboard: open the URL it prints, sign in with its key; Ctrl-C to stop
	bin/siftbatch demo --ui

demo-cluster: bin/siftbatch ## run the cluster demo: three serve processes on loopback, one killed and brought back; then Ctrl-C to stop
	bin/siftbatch demo-cluster

install: ## go install ./cmd/siftbatch: the siftbatch command in $(go env GOPATH)/bin
	$(GO) install ./cmd/siftbatch

readme: ## run the README's bash blocks, the CLI's, the session's and the cluster's (the tests that extract them): curl and python3 needed
	$(GO) test -run '^TestREADME_' -count=1 -v ./cmd/siftbatch

# make test runs lint, test/race and test/rules at once (-j3): each waits on
# much besides the CPU (the race run on its tests' timers and processes,
# lint on its first build of staticcheck), and a first run on a fresh
# machine, with every build cache cold, costs the longest of them, not
# their sum.
test: ## lint, every test under the race detector and the alert rules' tests, at once: what CI runs (README, Make targets: the budget)
	@$(MAKE) --no-print-directory -j3 --output-sync=line lint test/race test/rules

test/race: ## go test -race ./... (-timeout 15m: the slowest package, powercuttest, takes 4-6 min under load)
	$(GO) test -race -count=1 -timeout 15m ./...

test/short: ## the quick tier: go test -short ./..., no race; long multi-process tests skip (< 90 s)
	$(GO) test -short -count=1 -timeout 3m ./...

test/browser: ## the dashboard's browser tests and demo --ui's (Chromium), under -race: CI runs them once
	SIFTBATCH_TIER=browser $(GO) test -race -count=1 -run Browser ./engine/dashboard/... ./cmd/siftbatch/internal/demo/...

# make test/rules: docs/observability's alert rules, checked and unit-tested
# by promtool (Debian's prometheus package: apt-get install prometheus;
# .ci/run installs it), then every expression of the rules and of the
# Grafana board parsed with Prometheus's PromQL parser and its series
# names checked against what a real serve exposes
# (docs/observability/testdata/exposed.txt, which TestServe_MetricsExposed
# keeps true) by the module of its own in docs/observability/promqlcheck.
PROMTOOL ?= promtool

.PHONY: test/rules
test/rules: ## the alert rules: promtool check and unit tests (apt-get install prometheus), and their and the board's series names against serve's
	@command -v $(PROMTOOL) > /dev/null || { echo "make test/rules needs promtool: apt-get install prometheus"; exit 1; }
	$(PROMTOOL) check rules docs/observability/alerts.yml
	cd docs/observability && $(PROMTOOL) test rules alerts_test.yml
	cd docs/observability/promqlcheck && $(GO) test -count=1 ./...

.PHONY: test/strace test/powercutfs bench/durable test/disk
test/powercutfs: ## the power-cut file system's own tests, verbose (root, /dev/fuse; make test runs them where it can mount, else they skip)
	$(GO) test -race -count=1 -v ./engine/enginetest/powercut/...

test/strace: ## durable mode's syscall order: serve --durable under strace syncs before each 202 and each next fetch (Debian's strace): CI runs it once
	SIFTBATCH_TIER=strace $(GO) test -race -count=1 -run '^TestServe_DurableSyncsBeforeAnswering$$' ./cmd/siftbatch/

ROUNDS ?= 5
test/disk: ## the disk tests' long tier: ROUNDS (5) rounds of serve's full tmpfs (its jobs, another process) and of the power-cut file system's ENOSPC and EIO, both durabilities (root; /dev/fuse)
	SIFTBATCH_DISK_ROUNDS=$(ROUNDS) $(GO) test -count=1 -v -run '^TestServe_Disk(Full|Faults)$$' -timeout 60m ./cmd/siftbatch/

test/node: ## the MCP server against a Node client on the official TypeScript SDK (npm ci from the committed lock file): CI runs it once
	SIFTBATCH_TIER=node $(GO) test -race -count=1 -run Node ./engine/mcpserver/...

test/codegen: ## a client generated by oapi-codegen (pinned) from the API's OpenAPI document compiles and completes a session: CI runs it once (needs the module proxy)
	SIFTBATCH_TIER=codegen $(GO) test -race -count=1 -run Codegen ./engine/httpapi/...

# make test/faults: engine/cluster/faults, the cluster under network faults:
# three serve processes, each in a network namespace of its own, under a
# partition, a split, a one-way partition, packet loss (iptables), delay
# (the harness's TCP proxies) and a paused process; a checker reads every
# client's history (docs/CLUSTER.md, Faults tested). Linux, root, ip and
# iptables (apt-get install -y iproute2 iptables); about 3 minutes, which
# CI allows it (FAULTS_BUDGET seconds, then timeout stops it).
FAULTS_BUDGET ?= 180

test/faults: ## the cluster under network faults in network namespaces (Linux, root, iproute2, iptables): CI runs it once, within FAULTS_BUDGET (180) s
	SIFTBATCH_TIER=faults timeout $(FAULTS_BUDGET) $(GO) test -race -count=1 -v -run '^TestFaults_' -timeout $$(( $(FAULTS_BUDGET) - 10 ))s ./engine/cluster/faults

# make test/powercut: the power-cut test's long tier (docs/RELIABILITY.md,
# "Power cut"): ROUNDS rounds of serve --durable, then ROUNDS of the default
# mode, on engine/enginetest/powercut's file system (Linux, root, /dev/fuse),
# each round a cut at a random moment under load; POWERCUT_SEED=N replays
# from round seed N. make test runs 10 durable rounds and 4 default ones.
# The log stays in $(POWERCUTLOG); its POWERCUT lines are the figures.
ROUNDS      ?= 200
POWERCUTLOG ?= powercut.out

.PHONY: test/powercut
test/powercut: ## power cuts under load, ROUNDS (200) rounds in each mode (Linux, root, /dev/fuse): run by hand, its figures in docs/RELIABILITY.md
	POWERCUT_ROUNDS=$(ROUNDS) $(GO) test -count=1 -v -timeout 6h -run '^TestPowerCut_(Durable|Default)$$' ./cmd/siftbatch/internal/powercuttest 2>&1 | tee $(POWERCUTLOG) | grep -E 'POWERCUT|seed [0-9]+ \(|^(--- |ok|FAIL)'; grep -q '^ok' $(POWERCUTLOG)

# make test/stress: STRESS_RUNS runs of make STRESS_TARGET in a row on a clean
# clone (of HEAD: commit first) in a temporary directory, while a CPU hog keeps
# every core busy; it stops at the first failure and prints each run's wall
# time. Logs stay in $(STRESSDIR)/.
STRESS_RUNS   ?= 5
STRESS_TARGET ?= test
STRESSDIR     ?= stress.out

test/stress: ## make test 5 times in a row on a clean clone under a CPU hog (STRESS_RUNS, STRESS_TARGET)
	STRESS_RUNS=$(STRESS_RUNS) STRESS_TARGET='$(STRESS_TARGET)' STRESSDIR='$(STRESSDIR)' MAKE='$(MAKE)' .ci/stress

lint: doclinks ## gofmt, go vet, staticcheck, the doc-link check
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags k8s ./...
	$(STATICCHECK) ./...

doclinks: ## every link, #section, path and test name in README.md, docs/*.md and this Makefile resolves, and every docs/ reference in Go comments
	$(GO) test -count=1 -run '^TestDocLinks_Resolve$$' ./docs

build: ## build the command and every example (go build ./...)
	$(GO) build ./...

build-k8s: ## build ./siftbatch with the Kubernetes provider (-tags k8s): what docs/k8s/ runs
	$(GO) build -tags k8s -o siftbatch ./cmd/siftbatch

# make proto: the messages between cluster nodes, regenerated with Debian's
# protoc (apt-get install protobuf-compiler) and protoc-gen-go at go.mod's
# google.golang.org/protobuf version, installed into $(PROTOBIN) (ignored by
# git). The committed file comes out unchanged (git diff --exit-code after);
# a protoc other than Debian 12's 3.21.12 changes its header's version line.
PROTOC   ?= protoc
PROTOBIN ?= $(shell $(GO) env GOPATH)/bin
PROTOS    = engine/cluster/clusterpb/cluster.proto

proto: ## regenerate engine/cluster/clusterpb/cluster.pb.go (protoc: apt-get install protobuf-compiler)
	@command -v $(PROTOC) > /dev/null || { echo "make proto needs protoc: apt-get install protobuf-compiler"; exit 1; }
	GOBIN=$(PROTOBIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$$($(GO) list -m -f '{{.Version}}' google.golang.org/protobuf)
	$(PROTOC) --plugin=protoc-gen-go=$(PROTOBIN)/protoc-gen-go --go_out=. --go_opt=paths=source_relative $(PROTOS)

# make bench: the figures of docs/PERFORMANCE.md, each
# benchmark -count=$(BENCHCOUNT) (the polling load $(POLLCOUNT)), medians by
# benchstat; about 8 minutes on 2 cores.
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
	@$(MAKE) --no-print-directory bench/reads
	@$(MAKE) --no-print-directory bench/poll
	@$(MAKE) --no-print-directory bench/boundaries
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $(BENCHDIR)/machine.txt
	@cat $(BENCHDIR)/engine.txt $(BENCHDIR)/actors.txt $(BENCHDIR)/actors-memory.txt $(BENCHDIR)/persistence.txt $(BENCHDIR)/rss.txt $(BENCHDIR)/reads.txt $(BENCHDIR)/poll.txt $(BENCHDIR)/boundaries.txt > $(BENCHDIR)/all.txt
	@echo; echo "== medians of $(BENCHCOUNT) runs"; $(BENCHSTAT) $(BENCHDIR)/all.txt
	@echo "== Submit and Status, 100k stored vs 1k (target: within 1.5x, i.e. at most +50%)"; $(BENCHSTAT) -filter '.name:Runner_Scaling' -col /stored $(BENCHDIR)/all.txt
	@echo "== dispatch, 10,000 live jobs vs 10 (target: within 2x, i.e. at most +100%)"; $(BENCHSTAT) -filter '.name:Supervisor_Dispatch' -col /live $(BENCHDIR)/all.txt
	@$(MAKE) --no-print-directory bench/reads-summary
	@cat $(BENCHDIR)/machine.txt

# The reads. READTIME is the -benchtime of the read benchmarks: their
# ops take 1 to 100 µs, so 200ms is tens of thousands of them.
READTIME  ?= 200ms
POLLCOUNT ?= 3

bench/reads: ## the reads: Runner.Job/Targets by result size, the HTTP poll vs /healthz, peak RSS of 16 readers; a poll beside a client that never reads, and 200 of one key
	@mkdir -p $(BENCHDIR)
	$(BENCHTEST) -bench '^BenchmarkRunner_Read$$' -benchmem -benchtime $(READTIME) ./engine | tee $(BENCHDIR)/reads-engine.txt; grep -q '^ok' $(BENCHDIR)/reads-engine.txt
	$(BENCHTEST) -bench '^BenchmarkServe_Poll$$' -benchmem -benchtime $(READTIME) ./cmd/siftbatch | tee $(BENCHDIR)/reads-http.txt; grep -q '^ok' $(BENCHDIR)/reads-http.txt
	$(BENCHTEST) -bench '^BenchmarkServe_ReadersRSS$$' -benchtime 1x ./cmd/siftbatch | tee $(BENCHDIR)/reads-rss.txt; grep -q '^ok' $(BENCHDIR)/reads-rss.txt
	$(BENCHTEST) -bench '^BenchmarkServe_SlowReader$$' -benchtime 10x ./cmd/siftbatch | tee $(BENCHDIR)/reads-slow.txt; grep -q '^ok' $(BENCHDIR)/reads-slow.txt
	$(BENCHTEST) -bench '^BenchmarkServe_SlowReadersOfOneKey$$' -benchtime 1x ./cmd/siftbatch | tee $(BENCHDIR)/reads-slow-key.txt; grep -q '^ok' $(BENCHDIR)/reads-slow-key.txt
	@cat $(BENCHDIR)/reads-engine.txt $(BENCHDIR)/reads-http.txt $(BENCHDIR)/reads-rss.txt $(BENCHDIR)/reads-slow.txt $(BENCHDIR)/reads-slow-key.txt > $(BENCHDIR)/reads.txt

bench/boundaries: ## the boundaries: a filter in its child process vs in process, the submit check's worst programs, serve's RSS under hostile filters, the cluster's mTLS vs plaintext
	@mkdir -p $(BENCHDIR)
	$(BENCHTEST) -bench '^(BenchmarkFilter|BenchmarkFilterStart|BenchmarkFetcher_FilterCheckWorst)$$' -benchmem -benchtime 300x ./engine/fetcher | tee $(BENCHDIR)/filters.txt; grep -q '^ok' $(BENCHDIR)/filters.txt
	$(GO) test -run '^$$' -count 3 -bench '^BenchmarkServe_HostileFilters$$' -benchtime 1x ./cmd/siftbatch | tee $(BENCHDIR)/filters-rss.txt; grep -q '^ok' $(BENCHDIR)/filters-rss.txt
	$(BENCHTEST) -bench '^BenchmarkCluster_Transport$$/^poll' -benchtime 2000x ./engine/cluster | tee $(BENCHDIR)/cluster-tls.txt; grep -q '^ok' $(BENCHDIR)/cluster-tls.txt
	$(BENCHTEST) -bench '^BenchmarkCluster_Transport$$/^throughput' -benchtime 20x ./engine/cluster | tee -a $(BENCHDIR)/cluster-tls.txt; grep -q '^ok' $(BENCHDIR)/cluster-tls.txt
	@cat $(BENCHDIR)/filters.txt $(BENCHDIR)/filters-rss.txt $(BENCHDIR)/cluster-tls.txt > $(BENCHDIR)/boundaries.txt

bench/poll: ## the polling load: targets/s with 200 clients polling live jobs vs /healthz (load from a process of its own)
	@mkdir -p $(BENCHDIR)
	$(GO) test -run '^$$' -count $(POLLCOUNT) -bench '^BenchmarkServe_PollLoad$$' -benchtime 1x -timeout 30m ./cmd/siftbatch | tee $(BENCHDIR)/poll.txt; grep -q '^ok' $(BENCHDIR)/poll.txt

# The durable mode's figures (docs/PERFORMANCE.md, "Durable mode"):
# DURABLECOUNT rounds, each running every benchmark once, default and
# durable side by side in each, the rounds one after another (alternating).
DURABLECOUNT ?= 8
bench/durable: ## durable vs default: throughput by workers and live jobs, Submit p50/p99, group sync vs SyncWrites, the disk's fsync rate
	@mkdir -p $(BENCHDIR)
	$(GO) test -c -o $(BENCHDIR)/engine.test ./engine
	$(GO) test -c -o $(BENCHDIR)/persistence.test ./persistence
	@: > $(BENCHDIR)/durable.txt
	@for i in $$(seq $(DURABLECOUNT)); do \
		echo "# round $$i load $$(cut -d' ' -f1 /proc/loadavg)" | tee -a $(BENCHDIR)/durable.txt; \
		(cd engine && ../$(BENCHDIR)/engine.test -test.run '^$$' -test.bench '^BenchmarkRunner_Durable$$' -test.benchtime 4000x) | tee -a $(BENCHDIR)/durable.txt; \
		(cd engine && ../$(BENCHDIR)/engine.test -test.run '^$$' -test.bench '^BenchmarkRunner_DurableSubmit$$' -test.benchtime 2000x) | tee -a $(BENCHDIR)/durable.txt; \
		(cd persistence && ../$(BENCHDIR)/persistence.test -test.run '^$$' -test.bench '^BenchmarkStore_DurableWrites$$' -test.benchtime 4000x) | tee -a $(BENCHDIR)/durable.txt; \
	done
	$(BENCHSTAT) $(BENCHDIR)/durable.txt

# make bench/fair: issue 34's figures (docs/PERFORMANCE.md, "One caller
# cannot exhaust serve"): this commit's serve, and beside it, alternating,
# the serve binary REF_BIN if set (a reference: another commit's, built with
# go build -o FILE ./cmd/siftbatch).
REF_BIN ?=
.PHONY: bench/fair
bench/fair: ## one caller cannot exhaust serve: RSS under one MCP batch POST, a bystander's GET beside floods of reads, the scheduler's own cost, /healthz and a tenant's GET under 24,000 idle connections (REF_BIN: a reference serve to run beside)
	@mkdir -p $(BENCHDIR)
	SIFTBATCH_REF_BIN=$(REF_BIN) $(GO) test -run '^$$' -count 2 -bench '^BenchmarkServe_MCPBatchRSS$$' -benchtime 1x ./cmd/siftbatch | tee $(BENCHDIR)/fair.txt; grep -q '^ok' $(BENCHDIR)/fair.txt
	SIFTBATCH_REF_BIN=$(REF_BIN) $(GO) test -run '^$$' -count 1 -bench '^BenchmarkServe_Bystander$$' -benchtime 2x -timeout 30m ./cmd/siftbatch | tee $(BENCHDIR)/fair-bystander.txt; grep -q '^ok' $(BENCHDIR)/fair-bystander.txt
	$(GO) test -run '^$$' -count 3 -bench '^BenchmarkScheduler_Uncontended$$' -benchtime 200000x ./engine/internal/readsched | tee $(BENCHDIR)/fair-sched.txt; grep -q '^ok' $(BENCHDIR)/fair-sched.txt
	SIFTBATCH_REF_BIN=$(REF_BIN) $(GO) test -run '^$$' -count 1 -bench '^BenchmarkServe_IdleConnections$$' -benchtime 1x -timeout 30m ./cmd/siftbatch | tee $(BENCHDIR)/fair-idle.txt; grep -q '^ok' $(BENCHDIR)/fair-idle.txt

bench/reads-summary: ## the medians of bench/reads and bench/poll, and their ratios (run those first)
	@echo "== Runner.Job and Runner.Targets, 512 KiB results vs 1 KiB (target: within 1.5x in time and B/op; Job <= 5us, Targets <= 40us)"
	@$(BENCHSTAT) -filter '.name:Runner_Read /result:(1KiB OR 512KiB)' -col /result $(BENCHDIR)/reads.txt
	@echo "== the same, alternating in one loop: x-512KiB/1KiB is the time ratio"
	@$(BENCHSTAT) -filter '.fullname:/Runner_Read.*alternating/' $(BENCHDIR)/reads.txt
	@echo "== HTTP poll without results, alternating: x-16MiB/8KiB (target <= 3), x-16MiB/healthz (target <= 2)"
	@$(BENCHSTAT) -filter '.name:Serve_Poll' $(BENCHDIR)/reads.txt
	@echo "== peak RSS growth of serve under 16 readers of 16 MiB (target <= 256 MiB)"
	@$(BENCHSTAT) -filter '.name:Serve_ReadersRSS' $(BENCHDIR)/reads.txt
	@echo "== another caller's poll with and without a client that never reads (target: p99-ms/with <= 50)"
	@$(BENCHSTAT) -filter '.name:Serve_SlowReader' $(BENCHDIR)/reads.txt
	@echo "== polling load: x-jobs/healthz (target >= 0.8)"
	@$(BENCHSTAT) $(BENCHDIR)/poll.txt

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
