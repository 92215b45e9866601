# tether: thin wrappers over the go tool. `make help` lists the targets.
GO        ?= go
BIN       ?= bin/tether
# tether-fleet (the fleet's commands, with the etcd client) goes beside
# tether, where tether finds it.
FLEET_BIN  = $(dir $(BIN))tether-fleet
PKGS      ?= ./...
# Property-test budget: checks per property for `make proptest` (5000 sim
# checks, 100 real ones, and the enumeration take about 6 min with -race on
# this 2-core machine, inside the 10m timeout).
RAPID_CHECKS ?= 5000
# What `tether version` says: the commit, from git (empty outside a clone:
# the binary then says what the Go build information holds).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
# Where make install puts things: DESTDIR (a staging root, empty for the
# host) then PREFIX. The unit goes where systemd reads an administrator's
# units; /etc/tether is the agent's --config-dir.
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= /etc/systemd/system
SYSCONFDIR ?= /etc
# The manual pages, written by the binary from its own tables (make man).
MAN_OUT    ?= $(dir $(BIN))man

.PHONY: help build man install test test-e2e-agent test-long test-cluster bench-cluster fmt lint vet proptest bench bench-quick demo mutants clean

help:
	@echo "build | man | install | test | test-e2e-agent | test-long | test-cluster | bench-cluster | fmt | lint | proptest | bench | bench-quick | demo | mutants | clean"

# Static binaries (no cgo: os/user and net in pure Go): the CLI, its
# executor and its init shim are tether, started three times a task, and
# the dynamic loader's work is a third of each start here. tether-fleet
# serves `tether cluster` and the agent's fleet mode: it links the etcd
# client, which tether must not (each start would pay its initialisers;
# docs/fleet.md, "Two binaries").
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/tether
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(FLEET_BIN) ./cmd/tether-fleet

# The manual pages, tether(1) and tether-COMMAND(1), written by the built
# binary from the tables its parser uses (the command table, each
# command's flags, its help text): roff, no pandoc or go-md2man. Needs a
# build (make build), not a Go toolchain.
man:
	@test -x $(BIN) || { echo "$(BIN) is missing: run make build first"; exit 1; }
	rm -rf $(MAN_OUT)
	$(BIN) man $(MAN_OUT)

# install puts the built binaries (make build first: install needs no Go
# toolchain, so that `sudo make install` works), the manual pages, the
# systemd unit (its ExecStart naming BINDIR) and the agent's config
# directory (/etc/tether: the agent insists it be owned by root or its
# user and writable by no one else; an existing one is left as it is)
# under DESTDIR and PREFIX. It enables nothing: systemctl daemon-reload
# and systemctl enable --now tether-agent do (README.md, "Starting the
# agent at boot"). A store that root kept in its home before the system
# state directory (/var/lib/tether) is said, not moved.
install: man
	@test -x $(FLEET_BIN) || { echo "$(FLEET_BIN) is missing: run make build first"; exit 1; }
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BIN) $(FLEET_BIN) $(DESTDIR)$(BINDIR)/
	install -m 0644 $(MAN_OUT)/*.1 $(DESTDIR)$(MANDIR)/man1/
	sed 's|/usr/local/bin/tether|$(BINDIR)/tether|g' examples/tether-agent.service > $(DESTDIR)$(UNITDIR)/tether-agent.service.new
	chmod 0644 $(DESTDIR)$(UNITDIR)/tether-agent.service.new
	mv $(DESTDIR)$(UNITDIR)/tether-agent.service.new $(DESTDIR)$(UNITDIR)/tether-agent.service
	test -d $(DESTDIR)$(SYSCONFDIR)/tether || install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/tether
	@old=$$(getent passwd root | cut -d: -f6)/.local/state/tether; \
	if [ -z "$(DESTDIR)" ] && [ -e "$$old/tether.db" ]; then \
		echo "note: $$old holds the store root used before; tether-agent.service serves /var/lib/tether."; \
		echo "  Its tasks live on there: tether --state-dir $$old status lists them; stop them (or re-enable their files) before removing it."; \
	fi

# The race detector randomizes goroutine scheduling, so the property
# harness's determinism test runs once more without it.
test: build
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	$(GO) test -count=1 -run 'TestHarness_StepIsAFunctionOfItsPlan' ./proptest/
	$(MAKE) test-e2e-agent

# The CLI's end-to-end suite again, every test's state directory served by
# a real tether agent (TETHER_E2E_AGENT): the commands must print and exit
# as they do daemonless (about two minutes here).
test-e2e-agent:
	TETHER_E2E_AGENT=1 $(GO) test -count=1 -timeout 30m ./cmd/tether/

# The repetitions the default suite leaves out (many runs of the
# real-process property, hundreds of processes on one store, more data
# through the same paths): the tests of the packages whose test binaries
# take -long (those linking internal/testproc), run again with it. Every
# contract keeps a test in `make test`; this is for CI's longer run.
LONG_PKGS = $(shell $(GO) list -f '{{$$p := .ImportPath}}{{range .TestImports}}{{if eq . "github.com/tether-fsm/tether/internal/testproc"}}{{$$p}}{{"\n"}}{{end}}{{end}}{{range .XTestImports}}{{if eq . "github.com/tether-fsm/tether/internal/testproc"}}{{$$p}}{{"\n"}}{{end}}{{end}}' $(PKGS) | sort -u)
test-long: build
	$(GO) test -race -count=1 -timeout 60m $(LONG_PKGS) -long

# The fleet's tests alone: unit tests on an embedded etcd, then the
# end-to-end tests and the linearizability check on a real 3-member etcd
# (Debian's etcd-server; they skip, naming the package, where it is
# absent). `make test` runs them too.
test-cluster:
	$(GO) test -race -count=1 -timeout 10m ./cluster/

# The mirror against a bare etcd Txn loop, cluster status over 1,000 tasks,
# placing a 1,000-copy job and a lost node's copies (needs etcd-server).
bench-cluster:
	$(GO) test -run '^$$' -bench 'Mirror_VsBareTxn|Fleet_Status|Schedule_' -benchtime 10x ./cluster/

fmt:
	gofmt -w .

vet:
	$(GO) vet $(PKGS)

# staticcheck, pinned: `go run` fetches that version through the module
# proxy (and caches it), for this module and the bench module. An
# exception is justified where it is made (//lint:ignore CHECK reason).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: vet
	@out=$$(gofmt -l . | grep -v '^vendor/'); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

proptest:
	$(GO) test -race -count=1 -timeout 10m ./proptest/ -rapid.checks=$(RAPID_CHECKS)

# bench runs every row of the benchmark report (bench/cmd/report; the bench/
# module keeps go-plugin out of tether's go.mod) and writes BENCHMARKS.md;
# bench-quick runs fewer rounds of the same and only prints the table.
bench:
	cd bench && $(GO) run ./cmd/report -root .. -out ../BENCHMARKS.md

bench-quick:
	cd bench && $(GO) run ./cmd/report -root .. -quick

# The main job on the embedded default store ($$XDG_STATE_HOME/tether or
# ~/.local/state/tether): a task runs and exits, a net_raw task is refused
# cleanly, an isolated exec task shows what it sees from inside (it needs
# root), and status shows what the store recorded.
demo: build
	$(BIN) run examples/hello.hcl
	-$(BIN) run examples/net_raw.hcl
	-$(BIN) run examples/isolated.hcl
	$(BIN) status --all

# Each planted bug under proptest/testdata/mutants is applied as an overlay
# (in GOFLAGS, so the CLI's end-to-end tests build it too) and must be
# caught by the tests of the mutated files' reverse dependencies, run one
# package at a time with -failfast until one catches it; the catching test
# must pass alone without the mutant and fail alone again with it. Fails if
# one survives, no longer applies or does not build. Prints each mutant's
# catching test and time, and writes them to $(MUTANTS_REPORT).
MUTANTS ?= proptest/testdata/mutants
MUTANTS_REPORT ?= mutants-report.md
mutants:
	$(GO) run ./proptest/cmd/mutants -j 2 -budget 10m -report $(MUTANTS_REPORT) $(MUTANTS)

clean:
	rm -rf bin $(MUTANTS_REPORT)
