# fabriclab: switch ports, hosts and fabrics for RoCEv2/UEC congestion
# control, on plain Linux. `make help` lists the targets.

# sudo's secure_path often lacks Go: find it anyway.
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
# The one clang the committed BPF objects are built with (Debian 12 clang-19).
CLANG ?= clang-19
STRIP ?= llvm-strip-19
BIN := bin
# Tools the tests, the benchmark and the demo run (Debian package names).
RUNTIME_DEPS := iperf3 iproute2 ethtool tcpdump tshark python3-scapy

# make install: the binaries, the daemon's unit and its config (kept if present).
PREFIX ?= /usr/local
DESTDIR ?=
UNITDIR ?= /etc/systemd/system
CONFDIR ?= /etc/fabriclab
INSTALL_BINS := fabriclabd fabriclab roceperf portctl dctcp

.PHONY: install uninstall help build generate check-generate deps test unit-test netns-test bench bench-smoke demo lab experiment wan-experiment htsim-compare lint clean

help:
	@echo "make build          build portctl, roceperf, fabriclab, fabriclabd, dctcp and fabricbench into $(BIN)/"
	@echo "make demo           (root) live DCQCN demo: RoCEv2 senders share a WRED port (DEMO_FLAGS=uet, tcp, -print: see fabriclab help)"
	@echo "make lab            (root) run a lab file: make lab LAB=host/labfile/examples/dumbbell.yaml (LAB_FLAGS='-t 2s')"
	@echo "make test           (root) lint, unit, BPF and netns tests; nothing skipped as root"
	@echo "make unit-test      unit tests only (no root needed for most; skips what needs it)"
	@echo "make netns-test     (root) only the tests in network namespaces (host/lab, host/labfile, netns-tests)"
	@echo "make bench          (root) per-packet cost, TCP throughput, roceperf/UET vs iperf3 -u, CNP reaction, UET incasts beside htsim, QP scale, an hour's soak (HTSIM=dir; BENCH_FLAGS=-help, -soak 0 skips it)"
	@echo "make bench-smoke    (root) every bench section once, short (about a minute): the bench still runs"
	@echo "make experiment     (root) ECN# vs step/CoDel/TCN under 3x RTT spread, tuned from measured RTTs (a lab file; EXPERIMENT_FLAGS=-runs 1)"
	@echo "make htsim-compare  (root) htsim beside the lab: ring all-reduce, all-to-all, permutation on a leaf-spine and a fat tree, UET, both runs' completion over ideal (HTSIM=dir; HTSIM_FLAGS=-runs 5)"
	@echo "make wan-experiment (root) RoCEv2 across a WAN: RFC 6040 vs two thresholds with PE rate or reroute (a lab file; WAN_FLAGS=-runs 3)"
	@echo "make generate       rebuild BPF objects and Go bindings (needs $(CLANG))"
	@echo "make check-generate (CI) generate, then fail if the committed BPF objects differ"
	@echo "make deps           (root) apt-get install the runtime tools that are missing: $(RUNTIME_DEPS)"
	@echo "make install        (root) $(INSTALL_BINS) to $(PREFIX)/bin, the systemd unit, $(CONFDIR)/fabriclabd.yaml"
	@echo "make uninstall      (root) stop and remove them (the config stays)"
	@echo "make lint           gofmt and go vet"
	@echo "make clean          remove $(BIN)/"

build:
	$(GO) build -o $(BIN)/ ./cmd/...

generate:
	cd bpf && BPF2GO_CC=$(CLANG) BPF2GO_STRIP=$(STRIP) $(GO) generate ./...

# CI: the committed objects must be what the sources compile to.
check-generate: generate
	@git diff --exit-code -- bpf/ || { echo "BPF objects differ from their sources: run 'make generate' and commit"; exit 1; }

# Install missing runtime tools (root, Debian/Ubuntu).
deps:
	@missing=""; \
	for t in iperf3 ip tc ethtool tcpdump tshark; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	/usr/bin/python3 -c 'import scapy.contrib.roce' >/dev/null 2>&1 || missing="$$missing python3-scapy"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing: apt-get install -y $(RUNTIME_DEPS)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y $(RUNTIME_DEPS) >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y $(RUNTIME_DEPS) >/dev/null; }; \
	fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Packages run one at a time (-p 1): the netns tests measure rates and
# queues and must not share 2 cores with each other.
test: deps lint
	$(GO) test -count=1 -p 1 -timeout 20m ./...

# host/lab/link measures the delay link's capacity: netns-test runs it alone.
unit-test:
	$(GO) test -count=1 $$($(GO) list ./qdisc/... ./host/... ./cmd/... | grep -v /host/lab/link)

netns-test: deps
	$(GO) test -count=1 -p 1 -timeout 15m -v ./host/lab/... ./host/labfile/ ./netns-tests/...

BENCH_FLAGS ?=
bench: deps
	$(GO) build -o $(BIN)/ ./cmd/fabricbench
	$(BIN)/fabricbench $(BENCH_FLAGS)

# CI: every section of the bench once, short; fails only if a measurement
# cannot be made (the numbers are not judged).
bench-smoke: deps
	$(GO) build -o $(BIN)/ ./cmd/fabricbench
	$(BIN)/fabricbench -smoke

DEMO_FLAGS ?=
demo: deps
	$(GO) build -o $(BIN)/ ./cmd/fabriclab
	$(BIN)/fabriclab demo $(DEMO_FLAGS)

# A lab in one file (host/labfile): fabriclab run LAB.
LAB ?= host/labfile/examples/dumbbell.yaml
LAB_FLAGS ?=
lab: deps
	$(GO) build -o $(BIN)/ ./cmd/fabriclab
	$(BIN)/fabriclab run $(LAB) $(LAB_FLAGS)

# Seed 002's testbed experiment (ECN♯): a lab file whose thresholds each
# run tunes from the RTTs it measures first (EXPERIMENT_FLAGS: fabriclab
# run's flags, e.g. -runs 1 -variants step-tail,ecnsharp); writes
# experiment-out/.
EXPERIMENT_FLAGS ?=
experiment: deps
	$(GO) build -o $(BIN)/ ./cmd/fabriclab
	$(BIN)/fabriclab run -o experiment-out $(EXPERIMENT_FLAGS) host/labfile/examples/ecnsharp.yaml

# Issue 13 §5, the WAN lab's experiment (seed 001): a lab file, run by
# fabriclab (WAN_FLAGS: fabriclab run's flags, e.g. -runs 3); writes
# wan-experiment-out/.
WAN_FLAGS ?=
wan-experiment: deps
	$(GO) build -o $(BIN)/ ./cmd/fabriclab
	$(BIN)/fabriclab run -o wan-experiment-out $(WAN_FLAGS) host/labfile/examples/wan-experiment.yaml

# Issue 29: htsim beside the lab, the same matrix on the same leaf-spine
# (a ring all-reduce and an all-to-all over 8 hosts, UET under NSCC and
# RCCC; a permutation over 16 hosts on a leaf-spine and on a fat tree,
# under ECMP and spraying, with SLEEK on both sides too, on a fat tree
# oversubscribed 2:1 and on one with faster cores; every fabric stores
# and forwards and has NICs: 80 runs of 15-25 s). HTSIM is htsim's build
# directory (docs/htsim.md);
# without it each run's htsim/ gets the topology, the .cm and a script
# that runs them. HTSIM_FLAGS: fabriclab run's flags; writes
# htsim-compare-out/.
HTSIM ?=
HTSIM_FLAGS ?= -runs 5
htsim-compare: deps
	$(GO) build -o $(BIN)/ ./cmd/fabriclab
	$(BIN)/fabriclab run -o htsim-compare-out/ring -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-ring.yaml
	$(BIN)/fabriclab run -o htsim-compare-out/alltoall -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-alltoall.yaml
	$(BIN)/fabriclab run -o htsim-compare-out/permutation -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-permutation.yaml
	$(BIN)/fabriclab run -o htsim-compare-out/fattree -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-fattree.yaml
	$(BIN)/fabriclab run -o htsim-compare-out/fattree-os -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-fattree-os.yaml
	$(BIN)/fabriclab run -o htsim-compare-out/fattree-core -htsim "$(or $(HTSIM),none)" $(HTSIM_FLAGS) host/labfile/examples/htsim-fattree-core.yaml

install:
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(INSTALL_BINS))
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(CONFDIR)
	install -m 0755 $(addprefix $(BIN)/,$(INSTALL_BINS)) $(DESTDIR)$(PREFIX)/bin/
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g; s|/etc/fabriclab/|$(CONFDIR)/|g' cmd/fabriclabd/fabriclabd.service > $(DESTDIR)$(UNITDIR)/fabriclabd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/fabriclabd.service
	@if [ -e $(DESTDIR)$(CONFDIR)/fabriclabd.yaml ]; then echo "keeping $(DESTDIR)$(CONFDIR)/fabriclabd.yaml"; \
	else install -m 0644 cmd/fabriclabd/fabriclabd.yaml $(DESTDIR)$(CONFDIR)/fabriclabd.yaml; fi
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; \
	echo "installed: systemctl enable --now fabriclabd"; fi

uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now fabriclabd 2>/dev/null || true; fi
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(INSTALL_BINS)) $(DESTDIR)$(UNITDIR)/fabriclabd.service
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(DESTDIR)$(CONFDIR)/fabriclabd.yaml (remove it by hand)"

clean:
	rm -rf $(BIN)
