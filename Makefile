# troop: the two commands are `make demo` and `make test`.

GO      ?= go
BIN     := bin/troop
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Short fuzz runs in make test, 50,000 inputs per target (1 to 30 s each,
# about 2 min for all of them on a 2-core machine, builds included);
# `make fuzz FUZZTIME=10m` for a long one. A count rather than a duration,
# because Go's fuzzer sometimes fails a timed run at its deadline with no
# failing input; scripts/fuzz repeats such a run once.
FUZZTIME ?= 50000x

# Packages tested at once: at least 3, even on 2 cores. Most of the suite's
# time is spent waiting on real processes (a lab's node timeout, a pause),
# so a third package costs the others little: on a 2-core machine a
# fresh-clone .ci/run took 577 s with -p 3 against 984 s with the default
# -p 2, and the slowest packages took as long either way.
TESTP ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -lt 3 ] && n=3; echo $$n)

# nutcracker lives in /usr/sbin, which is not on every user's PATH.
export PATH := $(PATH):/usr/sbin

# Planted bugs (troop_planted_bug), deliberate defects that the tests plant
# to check their checkers, exist only in builds with the tag planted: the
# tests and the nodes they start have them, bin/troop and the image do not.

# troop is pure Go: built without cgo it is static (the Docker tests put it
# in an image FROM scratch), and every build and test of the suite shares
# one set of compiled packages instead of compiling them twice.
export CGO_ENABLED := 0

.PHONY: build test test-k8s unit fuzz demo bench compat image clean

# bin/troop-node is the node alone, which the lab's nodes run when it sits
# next to bin/troop.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/troop ./cmd/troop-node

# -timeout bounds each package's tests: the node package took 505 s of a
# fresh-clone run beside other builds (load 15 to 20): 10 min was too close.
test:
	@scripts/need redis-server redis-cli redis-benchmark nutcracker chromium tclsh promtool rq celery sidekiq
	@scripts/dynomite >/dev/null || [ $$? -eq 3 ] # 3: no Dynomite to build here; its tests say so and skip
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags planted ./...
	$(GO) test -tags planted -count=1 -timeout 14m -p $(TESTP) ./...
	@$(MAKE) --no-print-directory fuzz

# The Kubernetes tests against a real API server (the tests named
# *APIServer*; make test skips them): scripts/k8s-bins builds kube-apiserver,
# etcd and kwok from the Go module proxy once, into
# ${XDG_CACHE_HOME:-~/.cache}/troop/k8s/VERSION, outside the repository.
# From a fresh clone with empty Go caches it took 22 min 20 s on 2 shared
# cores (kube-apiserver 13 min of it); with the binaries built, 76 s at a
# load average of 10 to 12, 38 s of it ./deploy's tests (a whole troop run).
test-k8s:
	@bin=$$(scripts/k8s-bins) && TROOP_K8S_BIN=$$bin $(GO) test -count=1 -timeout 15m -run APIServer ./internal/testkube ./chaos/kubechaos ./deploy

fuzz:
	scripts/fuzz ./resp FuzzParseCommand $(FUZZTIME)
	scripts/fuzz ./resp FuzzReadRaw $(FUZZTIME)
	scripts/fuzz ./resp FuzzFrameScanner $(FUZZTIME)
	scripts/fuzz ./node FuzzParseTxRequest $(FUZZTIME)
	scripts/fuzz ./node FuzzGlobMatch $(FUZZTIME)
	scripts/fuzz ./node FuzzNotifyFlags $(FUZZTIME)
	scripts/fuzz ./topology FuzzParse $(FUZZTIME)
	scripts/fuzz ./topology FuzzParseSeedList $(FUZZTIME)
	scripts/fuzz ./chaos FuzzParseConfig $(FUZZTIME)
	scripts/fuzz ./fit FuzzParseScope $(FUZZTIME)
	scripts/fuzz ./fit FuzzReadSpans $(FUZZTIME)
	scripts/fuzz ./fit FuzzDecodeLineage $(FUZZTIME)
	scripts/fuzz ./fit FuzzDecodeOTLP $(FUZZTIME)
	scripts/fuzz ./ldfi/oracle FuzzSum $(FUZZTIME)
	scripts/fuzz ./suite FuzzParseConfig $(FUZZTIME)
	scripts/fuzz ./client FuzzParseDescribed $(FUZZTIME)
	scripts/fuzz ./client FuzzParseLevels $(FUZZTIME)
	scripts/fuzz ./internal/filekind FuzzSniff $(FUZZTIME)
	scripts/fuzz ./bench FuzzParseShard $(FUZZTIME)

demo: build
	@scripts/need redis-server
	$(BIN) run --coordination --out .troop/run

bench: build
	@scripts/need redis-server redis-cli redis-benchmark nutcracker
	@scripts/dynomite >/dev/null || [ $$? -eq 3 ] # 3: no Dynomite to build here; the peers experiment says so and skips
	$(GO) run ./perf/store --troop $(BIN) --out .troop/perf-store.json
	perf/store/rediscost.sh
	$(BIN) ldfi bench --out .troop/ldfi-bench.json

# Redis's own tests (the units of the installed redis-server's Debian source
# package) through a node of a 3-rack cluster, against redis-server itself;
# the report lists every test that fails only through the node.
compat:
	@scripts/need redis-server tclsh
	TROOP_REDIS_SUITE=all TROOP_REDIS_SUITE_REPORT=$(CURDIR)/.troop/redis-suite.md $(GO) test -count=1 -run TestRedisSuite -timeout 30m -v ./node

# The container images (docs/deploy.md), built with no registry and loaded
# into the Docker Engine as `docker import` does, each tagged latest and
# VERSION: troop-node, the node alone with this host's redis-server and bash
# and their libraries, which the Compose file's and the manifests' nodes
# run; troop, the whole troop with bash, which their bench shards run. The
# binaries are stripped of their symbol tables (-s -w), a quarter of their
# size.
image:
	@scripts/need redis-server bash
	$(GO) build -ldflags "$(LDFLAGS) -s -w" -o bin/image/ ./cmd/troop ./cmd/troop-node
	$(GO) run ./deploy/mkimage --node bin/image/troop-node --tag troop-node:latest --tag troop-node:$(VERSION)
	$(GO) run ./deploy/mkimage --troop bin/image/troop --tag troop:latest --tag troop:$(VERSION)

clean:
	rm -rf bin .troop
