# xnf — build, test and demo. Each target installs what it needs first
# (scripts/deps.sh GROUP: its Debian packages, bpffs) and must run as root.

export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
XNF := target/release/xnf

.PHONY: all build demo demo-containers layout-bump peers test test-host test-kernels fmt fmt-check fuzz clippy clean man deb

all: build

deps-%:
	@scripts/deps.sh $*

build: deps-build
	$(CARGO) build --release --workspace

## demo: build, then run the default lab experiment (kernel vs xnf router,
## 64-byte IPv4, 4 flows, 3 runs, with a CPU-vs-load curve; about 3 minutes
## on 2 cores), print the ratio and write results/demo.{json,csv,html}.
demo: deps-demo build
	@mkdir -p results
	$(XNF) lab router --load-curve 4 --json results/demo.json --csv results/demo.csv
	$(XNF) lab report results/demo.json -o results/demo.html

## demo-containers: a chain of two NFs in podman containers (real ptp
## plugin, xnf-cni chained after it; and joined with --container), traffic
## from the lab generator, per-hop counts, against the same NFs in plain
## namespaces; everything removed on exit (about 2 minutes).
demo-containers: deps-containers build
	$(XNF) lab chain --variants xnf-podman-cni,xnf-podman,xnf-linux-nf --length 2 --runs 3 --seconds 2 --warmup 3

## test: every test on this machine's kernel, then again inside each kernel
## of the matrix (Debian's 6.1, booted under qemu; see README "Kernels").
## Installs every package a test uses and builds the peer tools the lab's
## tests compare with (scripts/peers.sh). Both parts run whatever fails,
## and every failing test binary is named at the end: one failure hides
## nothing. While developing: `make test-host` (this kernel only), `make
## test-kernels KERNEL=6.1` (one guest kernel), or scripts/kernels.sh test
## 6.1 router-vlan.
test: deps-test peers
	@fmt=0; host=0; guest=0; \
	$(MAKE) --no-print-directory fmt-check || fmt=$$?; \
	$(MAKE) --no-print-directory test-host || host=$$?; \
	$(MAKE) --no-print-directory test-kernels || guest=$$?; \
	ok() { [ $$1 = 0 ] && echo passed || echo FAILED; }; \
	echo "make test: format $$(ok $$fmt), host part $$(ok $$host), kernel matrix $$(ok $$guest)"; \
	[ $$fmt = 0 ] && [ $$host = 0 ] && [ $$guest = 0 ]

# The tree is formatted by rustfmt with rustfmt.toml; `make fmt` formats it.
fmt:
	$(CARGO) fmt --all

fmt-check:
	@$(CARGO) fmt --all -- --check >/dev/null 2>&1 || { echo "rustfmt: these files are not formatted (run make fmt):" >&2; $(CARGO) fmt --all -- --check -l >&2; exit 1; }

# --no-fail-fast: cargo runs every test binary even after one fails, and
# names every failed one at the end.
test-host: deps-test layout-bump
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace --no-fail-fast

KERNEL ?= all
test-kernels: deps-test layout-bump
	@scripts/kernels.sh setup
	@scripts/kernels.sh test $(KERNEL)

## layout-bump: target/debug/xnf-layout-bump, this source built with one
## more field in the lb's connection value and the filter's bucket: the
## build the upgrade tests upgrade to (and back from). Features change only
## the crates that have them, so the normal build after it only relinks.
layout-bump: deps-build
	$(CARGO) build -p xnf --features layout-bump
	cp target/debug/xnf target/debug/xnf-layout-bump
	$(CARGO) build -p xnf

## peers: xdp-tools' xdp-filter and xdp-forward, built from source into
## /opt/xnf/peers (or $$XNF_PEERS), which `xnf lab` compares xnf with.
peers: deps-build
	@scripts/peers.sh

## fuzz: every program's differential fuzzer with fresh random seeds, round
## after round, until stopped (FUZZ_ROUNDS=N rounds, FUZZ_FRAMES per program
## per round, default 10^7). Not part of `make test`, which runs 10^6 frames
## per program from a fixed seed.
fuzz: deps-test
	@scripts/fuzz.sh

## man: the manual pages of xnf and of every subcommand, the lab's too
## (xnf.1, xnf-router.1, xnf-router-attach.1, xnf-lab-router.1, ...), from
## the release binaries into target/man/man1: `man -M target/man
## xnf-router` reads one; install them with `cp target/man/man1/*.1
## /usr/local/share/man/man1/`.
man: build
	@rm -rf target/man
	$(XNF) man --out target/man/man1

## deb: the Debian packages of the release build, made with dpkg-deb alone
## (scripts/deb.sh): target/deb/xnf_VERSION_ARCH.deb (xnf, xnf-cni, the
## systemd unit, man pages, completions, /etc/xnf/xnf.toml as a conffile)
## and target/deb/xnf-lab_VERSION_ARCH.deb. Installs nothing: `apt install
## ./target/deb/xnf_*.deb`.
deb: build man
	@scripts/deb.sh --man target/man/man1 --out target/deb

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
