# orca — see README.md. `make run` and `make test` are the two commands a
# newcomer needs; both work on a fresh machine with only Go installed
# (`make test` also uses /usr/bin/kubectl when present).

GO      ?= go
BIN     := bin
RUNDIR  ?= .run
PKGS    := ./...

.PHONY: all build run test test-short conformance fuzz bench bench-short bench-go vet fmt clean

all: build

build: $(BIN)/orca-server $(BIN)/orca-agent $(BIN)/orca $(BIN)/hello.wasm $(BIN)/hello-container.tar

$(BIN)/orca-server: FORCE
	$(GO) build -o $@ ./controlplane/cmd/orca-server
# orca-agent is built without cgo: a static binary, and no Go plugin
# support. With cgo, the containerd client's plugin loader links Go's
# plugin package, and then the linker keeps every exported symbol (62 MB
# instead of 48 MB, 13 MiB more RSS at idle). A cgo build should add
# -tags no_dynamic_plugins (containerd's own tag).
$(BIN)/orca-agent: FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./nodeagent/cmd/orca-agent
$(BIN)/orca: FORCE
	$(GO) build -o $@ ./controlplane/cmd/orca
$(BIN)/hello.wasm: FORCE
	GOOS=wasip1 GOARCH=wasm $(GO) build -o $@ ./examples/hello-wasm
# The container example: a static Linux binary in an OCI image archive,
# built from source (no docker, no registry, no download).
$(BIN)/hello-container.tar: FORCE
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -o $(BIN)/hello-container ./examples/hello-container
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -o $(BIN)/toolbox ./examples/hello-container/toolbox
	$(GO) build -o $(BIN)/mkimage ./examples/hello-container/mkimage
	$(BIN)/mkimage -name hello-container:v1 -port 80 -toolbox $(BIN)/toolbox -o $@ $(BIN)/hello-container
FORCE:

# Builds everything, starts orca-server (embedded NATS) and one orca-agent
# with data under $(RUNDIR)/, deploys examples/hello-wasm and (where
# containerd can run) examples/hello-container and prints where to look.
# Runs until Ctrl-C.
# The script checks its ports first, then builds.
run:
	@RUNDIR=$(RUNDIR) MAKE=$(MAKE) bash deploy/dev/run.sh

# Unit, integration and end-to-end tests (real NATS, real wazero, real kubectl).
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 15m $(PKGS)

# The kubectl conformance script with every kubectl from 1.27 to 1.33 (it
# is part of `make test` too); prints the counts per kubectl version.
conformance:
	$(GO) test -count=1 -v -run '^TestKubectlConformance$$' ./controlplane/apiserver/conformance/

test-short:
	$(GO) test -short -count=1 $(PKGS)

# Fuzzes every request decoder for FUZZTIME each (their seed corpora run in
# `make test` too). A finding is written to the package's testdata/fuzz/
# and fails the run. The go command sometimes ends a fuzz run that found
# nothing with "context deadline exceeded" when the time runs out while it
# minimizes a new input: that is reported, not failed.
FUZZTIME ?= 10s
FUZZ_TARGETS := controlplane/apiserver:FuzzDecodeBody controlplane/apiserver:FuzzListOptions \
	controlplane/apiserver:FuzzPath controlplane/apiserver:FuzzPatch controlplane/apiserver:FuzzApply controlplane/store:FuzzKey \
	controlplane/auth/serviceaccount:FuzzAuthenticateToken controlplane/auth/serviceaccount:FuzzAuthorizationHeader controlplane/auth/bootstrap:FuzzParseToken
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; f=$${t#*:}; echo "fuzz $$f ($(FUZZTIME))"; \
	  if ! $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./$$pkg/ > .fuzz.out 2>&1; then \
	    cat .fuzz.out; \
	    if grep -q 'Failing input written' .fuzz.out || ! grep -q 'context deadline exceeded' .fuzz.out; then rm -f .fuzz.out; exit 1; fi; \
	    echo "fuzz $$f: the go command stopped at the deadline without a finding"; \
	  else tail -2 .fuzz.out; fi; \
	done; rm -f .fuzz.out

# The control-plane benchmarks of issue 9 (deploy/bench): builds the
# binaries, drives real orca-server processes, prints one table (before,
# orca, peer, ratio, target) and writes it as JSON under .bench/. Each
# figure is the median of several runs. BENCHFLAGS adds flags, e.g.
# BENCHFLAGS="-only '^a' -cpuprofile -memprofile" (see README,
# Benchmarks). `make bench` takes under 30 minutes, `make bench-short`
# under 5.
BENCHFLAGS ?=
bench:
	$(GO) run ./deploy/bench -out .bench $(BENCHFLAGS)
bench-short:
	$(GO) run ./deploy/bench -short -out .bench $(BENCHFLAGS)

# The package benchmarks (go test -bench), each against its peer.
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./controlplane/store/ ./wasm/... ./nodeagent/proxy/
	$(GO) test -run '^$$' -bench PodStart -benchtime 1x ./nodeagent/
	$(GO) test -run '^$$' -bench WriteAtomic -benchtime 200x ./nodeagent/
	$(GO) test -run '^$$' -bench Sandbox -benchtime 5x ./nodeagent/podnet/
	$(GO) test -run '^$$' -bench StreamThroughput -benchtime 20x ./controlplane/nodeapi/
	$(GO) test -run '^$$' -bench ManagedFields -benchmem ./controlplane/apiserver/

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) $(RUNDIR)
