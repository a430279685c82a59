# xnf — build, test and demo. Both `make demo` and `make test` install what
# they need first (Debian packages, bpffs) and must run as root.

export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
XNF := target/release/xnf

.PHONY: all deps build demo demo-containers test test-host test-kernels fuzz clippy clean

all: build

deps:
	@scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

## demo: build, then run the default lab experiment (kernel vs xnf router,
## 64-byte IPv4, 4 flows, 3 runs, with a CPU-vs-load curve; about 3 minutes
## on 2 cores), print the ratio and write results/demo.{json,csv,html}.
demo: build
	@mkdir -p results
	$(XNF) lab router --load-curve 4 --json results/demo.json --csv results/demo.csv
	$(XNF) lab report results/demo.json -o results/demo.html

## demo-containers: a chain of two NFs in podman containers (real ptp
## plugin, xnf-cni chained after it; and joined with --container), traffic
## from the lab generator, per-hop counts, against the same NFs in plain
## namespaces; everything removed on exit (about 2 minutes).
demo-containers: build
	$(XNF) lab chain --variants xnf-podman-cni,xnf-podman,xnf-linux-nf --length 2 --runs 3 --seconds 2 --warmup 3

## test: every test on this machine's kernel, then again inside each kernel
## of the matrix (Debian's 6.1, booted under qemu; see README "Kernels").
## While developing: `make test-host` (this kernel only), `make test-kernels
## KERNEL=6.1` (one guest kernel), or scripts/kernels.sh test 6.1 router-vlan.
test: test-host test-kernels

test-host: deps
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace

KERNEL ?= all
test-kernels: deps
	@scripts/kernels.sh setup
	@scripts/kernels.sh test $(KERNEL)

## fuzz: every program's differential fuzzer with fresh random seeds, round
## after round, until stopped (FUZZ_ROUNDS=N rounds, FUZZ_FRAMES per program
## per round, default 10^7). Not part of `make test`, which runs 10^6 frames
## per program from a fixed seed.
fuzz: deps
	@scripts/fuzz.sh

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
