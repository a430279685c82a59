#!/bin/sh
# Long fuzzing runs outside CI: every program's differential fuzzer (the
# test targets named *fuzz*), round after round, each round with a fresh
# random seed. A failure prints the frames and the environment that
# reproduces them, and stops.
#   FUZZ_ROUNDS  rounds to run (default: until stopped)
#   FUZZ_FRAMES  frames per program per round (default 10000000)
set -eu
rounds=${FUZZ_ROUNDS:-0}
frames=${FUZZ_FRAMES:-10000000}
cargo build --release --workspace --all-targets
i=0
while [ "$rounds" -eq 0 ] || [ "$i" -lt "$rounds" ]; do
	i=$((i + 1))
	seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
	echo "xnf fuzz: round $i, XNF_FUZZ_SEED=$seed XNF_FUZZ_FRAMES=$frames"
	if ! XNF_FUZZ_SEED=$seed XNF_FUZZ_FRAMES=$frames cargo test --release --workspace --test '*fuzz*' -- --nocapture; then
		echo "xnf fuzz: round $i failed with XNF_FUZZ_SEED=$seed (see the frames above)" >&2
		exit 1
	fi
done
