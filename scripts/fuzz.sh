#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/; docs/security.md "Fuzzing") with cargo fuzz.
#
#   bash scripts/fuzz.sh                 # CI: every target, FUZZ_RUNS inputs each (default 20000)
#   bash scripts/fuzz.sh verb_line 600   # by hand: one target for 600 seconds
#
# Seeds are fuzz/corpus/<target> (kept in the repository, read only here);
# what a run finds new goes to a scratch corpus under $FUZZ_WORK, so CI leaves
# the clone clean. Add a scratch input to fuzz/corpus by hand when it is
# worth keeping (`cargo fuzz cmin` first). A crash, a panic, a timeout, an
# allocation over 16 MiB (fuzz/src/lib.rs) or RSS over 512 MiB fails the run,
# and libFuzzer leaves the input in fuzz/artifacts/<target>/.
#
# The targets build without a sanitizer (`-s none`: the code is safe Rust,
# and the 16 MiB allocation limit is our own allocator's), with the nightly
# toolchain when rustup has one, else the stable one with RUSTC_BOOTSTRAP
# (cargo fuzz passes -Z flags to rustc).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-target}-fuzz}"
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
work="${FUZZ_WORK:-$(mktemp -d)}"

targets=(verb_line pkt_line push_options policy_toml governance_toml authorized_keys webhook_target event_decode krl tui_keys mcp_tool_call)
limits=(-max_len=4096 -rss_limit_mb=512 -timeout=10)
if [ "$#" -ge 1 ]; then
    targets=("$1")
    limits+=("-max_total_time=${2:-600}")
else
    limits+=("-runs=${FUZZ_RUNS:-20000}")
fi

cd fuzz
if [ "$#" -ge 1 ]; then
    cargo "${toolchain[@]}" fuzz build -s none "$1"
else
    cargo "${toolchain[@]}" fuzz build -s none
fi
for t in "${targets[@]}"; do
    mkdir -p "$work/$t"
    log="$work/$t.log"
    status=0
    cargo "${toolchain[@]}" fuzz run -s none "$t" "$work/$t" "corpus/$t" -- "${limits[@]}" \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    if [ "$status" != 0 ]; then
        tail -n 40 "$log" >&2
        echo "fuzz: $t failed after $runs inputs; the input is in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    echo "fuzz: $t: $runs inputs, no failure"
done
