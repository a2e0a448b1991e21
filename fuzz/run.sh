#!/bin/sh
# Runs each fuzz target after the seeds in fuzz/seeds, keeping what it finds
# in fuzz/corpus. Sanitizer off: the targets are safe Rust, and `-s none`
# builds on the stable toolchain (ASan needs nightly). Exits non-zero on the
# first crash, hang or OOM; libFuzzer leaves the input in fuzz/artifacts.
#
# Usage: fuzz/run.sh runs N [TARGET...]      (N executions per target)
#        fuzz/run.sh seconds S [TARGET...]   (S seconds per target)
set -eu
cd "$(dirname "$0")"
mode=${1:-runs}
amount=${2:-10000000}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
case $mode in
    runs) limit="-runs=$amount" ;;
    seconds) limit="-max_total_time=$amount" ;;
    *) echo "usage: $0 runs N | seconds S [TARGET...]" >&2; exit 2 ;;
esac
targets=${*:-jobfile cron jsonrpc}
for t in $targets; do
    mkdir -p "corpus/$t"
    echo "== $t ($mode $amount)"
    log="corpus/$t.log"
    if ! cargo fuzz run -s none "$t" "corpus/$t" "seeds/$t" -- \
        "$limit" -max_len=1024 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        tail -40 "$log"
        echo "FUZZ FAILURE in $t (input in fuzz/artifacts/$t)" >&2
        exit 1
    fi
    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb|stat::average_exec_per_sec)" "$log"
done
