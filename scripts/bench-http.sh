#!/usr/bin/env bash
# walletd over HTTP against a bare hyper server, on this machine, in one run.
#
# Builds the release binaries, starts the bare hyper baseline (`walletd-load baseline-server`),
# then drives walletd and the baseline with walletd-load: deposits only, transfers only and
# payments only, at --connections (64) for --duration (20) seconds each, walletd and baseline
# interleaved so both see the same machine. Each walletd run gets its own walletd on a fresh data
# dir (fsync always, rate limits off, a throwaway admin password, WALLETD_LOG=warn), so every
# run starts from the same state, as the stateless baseline does. Prints a side-by-side table
# with walletd/baseline ratios, each run's ledger audit, and the exact commands. Everything it
# starts is stopped on exit (trap EXIT).
#
#   scripts/bench-http.sh [--duration S] [--warmup S] [--connections N] [--wallets N]
#                         [--connections-sweep 1,4,16,64,256] [--sweep-duration S]
#                         [--mixes "deposit=100 transfer=100 payment=100"] [--fund AMOUNT]
#                         [--batch-sizes "100 1000"] [--batch-connections 8]
#                         [--perf S] [--client raw|hyper] [--fsync always|never] [--out DIR]
#                         [--same-server] [--no-build]
#
# --same-server: one walletd for all runs instead. History then accumulates from run to run, and
#   walletd's periodic snapshot (every 1M log records) lands inside later runs: this measures
#   requests while a snapshot is written (see BENCHMARKS.md).
# --connections-sweep: also run both mixes against both servers at each connection count, record
#   throughput and latency in DIR/sweep.csv (one row per run) and plot them to DIR/sweep.svg
#   with scripts/plot-sweep.py.
# --fsync never: walletd acknowledges before its log is durable (a benchmark-only mode); the
#   difference to the default shows what the disk costs, the rest is CPU.
# --perf S: afterwards, profile walletd for S seconds under the transfer load
#   (`perf record -g -p PID`) and print the top of `perf report --no-children`.
#
# Results: DIR (default target/bench-http/DATE) holds every run's JSON summary and log,
# runs.csv, sweep.csv, the server logs and commands.txt.
#
# The machine has 2 cores shared by the server and the load generator, and other work on it
# shows up as noise (shared/notes/machine-limits.md): read walletd only against the baseline
# measured in the same run, and look at the load averages printed before each run.
set -euo pipefail

DURATION=20
WARMUP=2
CONNECTIONS=64
WALLETS=100
SWEEP=""
SWEEP_DURATION=10
MIXES="deposit=100 transfer=100 payment=100"
BATCH_SIZES="100 1000"
BATCH_CONNECTIONS=8
# Each customer's funding: payments move money to the merchant for good (refunds are partial), so
# a payer with too little runs dry within seconds and the run would measure refusals.
FUND=1000000.00
PERF_SECONDS=0
CLIENT=raw
FSYNC=always
OUT=""
BUILD=1
SAME_SERVER=0

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --wallets) WALLETS="$2"; shift 2 ;;
        --connections-sweep) SWEEP="$2"; shift 2 ;;
        --sweep-duration) SWEEP_DURATION="$2"; shift 2 ;;
        --mixes) MIXES="$2"; shift 2 ;;
        --batch-sizes) BATCH_SIZES="$2"; shift 2 ;;
        --batch-connections) BATCH_CONNECTIONS="$2"; shift 2 ;;
        --fund) FUND="$2"; shift 2 ;;
        --perf) PERF_SECONDS="$2"; shift 2 ;;
        --client) CLIENT="$2"; shift 2 ;;
        --fsync) FSYNC="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --same-server) SAME_SERVER=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench-http.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="${OUT:-$TARGET_DIR/bench-http/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WALLETD="$TARGET_DIR/release/walletd"
LOAD="$TARGET_DIR/release/walletd-load"

# Every command that matters is printed as it runs and kept in commands.txt (say, run).
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

PIDS=()
DATA=""
WALLETD_PID=""
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid" 50
    done
    if [ -n "$DATA" ]; then rm -rf "$DATA"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== bench-http: $(date -u +%Y-%m-%dT%H:%M:%SZ), nproc $(nproc), $(uname -sr), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== $(rustc --version 2>/dev/null || echo 'rustc ?'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results in $OUT"

if [ "$BUILD" = 1 ]; then
    build_release
fi

# A data dir where fsync means something: not tmpfs.
SCRATCH="$(scratch_dir bench)"
export WALLETD_ADMIN_PASSWORD="bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

# start_walletd NAME: stops the previous walletd, if any, and starts a new one on a fresh data
# dir; sets WALLETD_PID and WALLETD_URL. Its output goes to $OUT/NAME.server.{out,err}.
start_walletd() {
    local name="$1"
    if [ -n "$WALLETD_PID" ]; then stop_pid "$WALLETD_PID" 100; fi
    if [ -n "$DATA" ]; then rm -rf "$DATA"; fi
    DATA="$(mktemp -d "$SCRATCH/walletd-bench-http.XXXXXX")"
    say "+ WALLETD_DATA_DIR=$DATA WALLETD_FSYNC=$FSYNC WALLETD_RATE_LIMITS=off WALLETD_ADMIN_PASSWORD=$WALLETD_ADMIN_PASSWORD WALLETD_LOG=warn WALLETD_FEE_SCHEDULE=YER:2.5+1 $WALLETD serve --listen 127.0.0.1:0 &"
    WALLETD_DATA_DIR="$DATA" WALLETD_FSYNC="$FSYNC" WALLETD_RATE_LIMITS=off WALLETD_LOG=warn WALLETD_FEE_SCHEDULE=YER:2.5+1 \
        "$WALLETD" serve --listen 127.0.0.1:0 >"$OUT/$name.server.out" 2>"$OUT/$name.server.err" &
    WALLETD_PID=$!
    PIDS+=("$WALLETD_PID")
    WALLETD_URL="$(wait_address "$OUT/$name.server.out" "$WALLETD_PID")"
    echo "== walletd (pid $WALLETD_PID) on $WALLETD_URL, data dir $DATA ($(findmnt -n -o FSTYPE -T "$DATA" 2>/dev/null || echo '?'))"
}
if [ "$SAME_SERVER" = 1 ]; then start_walletd shared; fi

say "+ $LOAD baseline-server --listen 127.0.0.1:0 --workers 2 &"
"$LOAD" baseline-server --listen 127.0.0.1:0 --workers 2 >"$OUT/baseline.out" 2>"$OUT/baseline.err" &
BASELINE_PID=$!
PIDS+=("$BASELINE_PID")
BASELINE_URL="$(wait_address "$OUT/baseline.out" "$BASELINE_PID")"
echo "== baseline (pid $BASELINE_PID) on $BASELINE_URL"

FAILED=0
# load NAME TARGET MIX CONNECTIONS DURATION CSV: one walletd-load run; JSON in $OUT/NAME.json.
load() {
    local name="$1" target="$2" mix="$3" connections="$4" duration="$5" csv="$6"
    local extra=("${@:7}")
    local where pid rc=0
    if [ "$target" = walletd ]; then
        if [ "$SAME_SERVER" = 0 ]; then start_walletd "$name"; fi
        where=(--url "$WALLETD_URL" --fund "$FUND"); pid="$WALLETD_PID"
    else
        where=(--baseline "$BASELINE_URL"); pid="$BASELINE_PID"
    fi
    echo "== $name: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    run "$LOAD" "${where[@]}" --mix "$mix" --connections "$connections" --wallets "$WALLETS" \
        --duration "$duration" --warmup "$WARMUP" --client "$CLIENT" --server-pid "$pid" \
        --label "$name" --csv "$csv" "${extra[@]}" --json >"$OUT/$name.json" 2> >(tee "$OUT/$name.log" >&2) || rc=$?
    if [ "$rc" != 0 ]; then
        echo "bench-http.sh: $name exited with $rc (1: the audit failed; see $OUT/$name.log)" >&2
        FAILED=1
    fi
}

# Payments: each payment is initiate + confirm (and one in 4 a partial refund), every step a
# request. The bare server cannot hold a payment's state, so its side of that row is the same
# fixed-JSON requests it answers for deposits: walletd's payment steps per second against the
# plain request rate of the same machine in the same run.
SWEEP_MIXES="deposit=100 transfer=100"
baseline_mix() { case "$1" in payment=*) echo "deposit=100" ;; *) echo "$1" ;; esac; }
for mix in $MIXES; do
    op="${mix%%=*}"
    load "walletd-$op" walletd "$mix" "$CONNECTIONS" "$DURATION" "$OUT/runs.csv"
    load "baseline-$op" baseline "$(baseline_mix "$mix")" "$CONNECTIONS" "$DURATION" "$OUT/runs.csv"
done

# Transfer batches (issue 15): POST /v1/transfers/batch of $size transfers over
# $BATCH_CONNECTIONS connections, beside the single-request and bare-server rows above. The row's
# transfer rate counts batches: transfers/s = its rate x the batch size.
for size in $BATCH_SIZES; do
    load "walletd-transfer-batch$size" walletd "transfer=100" "$BATCH_CONNECTIONS" "$DURATION" "$OUT/runs.csv" --batch "$size"
done

if [ -n "$SWEEP" ]; then
    for connections in ${SWEEP//,/ }; do
        for mix in $SWEEP_MIXES; do
            op="${mix%%=*}"
            load "sweep-walletd-$op-c$connections" walletd "$mix" "$connections" "$SWEEP_DURATION" "$OUT/sweep.csv"
            load "sweep-baseline-$op-c$connections" baseline "$mix" "$connections" "$SWEEP_DURATION" "$OUT/sweep.csv"
        done
    done
fi

if [ "$PERF_SECONDS" != 0 ]; then
    if [ "$SAME_SERVER" = 0 ]; then start_walletd perf; fi
    echo "== profiling walletd (pid $WALLETD_PID) under transfers for $PERF_SECONDS s" >&2
    say "+ $LOAD --url $WALLETD_URL --mix transfer=100 --connections $CONNECTIONS --duration $((PERF_SECONDS + 4)) &"
    "$LOAD" --url "$WALLETD_URL" --mix transfer=100 --connections "$CONNECTIONS" --wallets "$WALLETS" \
        --duration "$((PERF_SECONDS + 4))" --warmup "$WARMUP" --client "$CLIENT" --label perf \
        >"$OUT/perf-load.txt" 2>"$OUT/perf-load.log" &
    PERF_LOAD_PID=$!
    # Wait for the setup (registrations) to end before sampling.
    for _ in $(seq 600); do grep -q '^\[' "$OUT/perf-load.log" 2>/dev/null && break; sleep 0.1; done
    run perf record -g -p "$WALLETD_PID" -o "$OUT/perf.data" -- sleep "$PERF_SECONDS" 2>"$OUT/perf-record.log" || true
    wait "$PERF_LOAD_PID" || FAILED=1
    perf report -i "$OUT/perf.data" --no-children --stdio 2>/dev/null | head -80 >"$OUT/perf-report.txt" || true
    echo "== perf report --no-children --stdio | head -80 ($OUT/perf-report.txt)"
    cat "$OUT/perf-report.txt"
    # The same samples without call chains, and per thread: easier to rank.
    perf report -i "$OUT/perf.data" --no-children --stdio -g none --percent-limit 0.4 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -60 >"$OUT/perf-flat.txt" || true
    perf report -i "$OUT/perf.data" --no-children --stdio -g none --sort comm 2>/dev/null \
        | grep -v '^#' | grep -v '^$' >"$OUT/perf-threads.txt" || true
    echo "== perf report --no-children -g none --sort comm ($OUT/perf-threads.txt)"
    cat "$OUT/perf-threads.txt"
    echo "== perf report --no-children -g none --percent-limit 0.4 | head -60 ($OUT/perf-flat.txt)"
    cat "$OUT/perf-flat.txt"
fi

# The side-by-side table.
echo
echo "== walletd vs bare hyper: $CONNECTIONS connections, $DURATION s each after $WARMUP s warm-up, fsync $FSYNC, nproc $(nproc), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
if command -v jq >/dev/null; then
    printf '%-9s %-26s %12s %12s %10s\n' mix metric walletd bare walletd/bare
    for mix in $MIXES; do
        op="${mix%%=*}"
        w="$OUT/walletd-$op.json"; b="$OUT/baseline-$op.json"
        [ -s "$w" ] && [ -s "$b" ] || { echo "$op: missing results"; continue; }
        row() { # label jq-expression scale
            local wv bv
            wv="$(jq -r "$2 // empty" "$w")"; bv="$(jq -r "$2 // empty" "$b")"
            awk -v mix="$op" -v label="$1" -v w="$wv" -v b="$bv" -v s="$3" 'BEGIN {
                if (w == "" || b == "") {
                    printf "%-9s %-26s %12s %12s %10s\n", mix, label, (w == "" ? "-" : sprintf("%.3f", w / s)), (b == "" ? "-" : sprintf("%.3f", b / s)), "-"; exit }
                printf "%-9s %-26s %12.3f %12.3f %10s\n", mix, label, w / s, b / s, (b > 0 ? sprintf("%.2f", w / b) : "-") }'
        }
        row "requests/s" .total.rps 1
        row "p50 ms" .total.p50_us 1000
        row "p99 ms" .total.p99_us 1000
        row "p99.9 ms" .total.p999_us 1000
        row "max ms" .total.max_us 1000
        row "server CPU us/request" .cpu.server_us_per_request 1
        row "server CPU cores" .cpu.server_cores 1
        row "load generator CPU cores" .cpu.client_cores 1
        row "wal fsyncs/s" .wal.fsyncs_per_s 1
        row "wal records per fsync" .wal.records_per_fsync 1
        row "wal mean fsync us" .wal.mean_fsync_us 1
        verdict="$(jq -r --slurpfile b "$b" '
            (.total.rps / $b[0].total.rps) as $ratio
            | "\(if $ratio >= 0.5 then "met" else "MISSED" end) (ratio \($ratio * 100 | round / 100) vs >= 0.5); p99 \(.total.p99_us / 1000) ms: \(if .total.p99_us < 10000 then "met" else "MISSED" end) (< 10 ms)"' "$w")"
        audit="$(jq -r 'if .audit == null then "none" elif .audit.ok then "OK (\(.audit.wallets) wallets, total \(.audit.total_actual) YER, \(.audit.unknown_requests) unknown outcomes)" else "FAILED: \(.audit.mismatches | length) mismatches" end' "$w")"
        echo "$op: target throughput $verdict"
        echo "$op: walletd non-2xx $(jq '[.non_2xx[].count] | add // 0' "$w"), transport errors $(jq '[.transport_errors[].count] | add // 0' "$w"); audit $audit"
    done
else
    echo "(jq not found: see the JSON summaries in $OUT)"
fi
if [ -s "$OUT/sweep.csv" ]; then
    echo
    echo "== connections sweep ($OUT/sweep.csv)"
    cat "$OUT/sweep.csv"
    say "+ scripts/plot-sweep.py $OUT/sweep.csv $OUT/sweep.svg"
    python3 "$ROOT/scripts/plot-sweep.py" "$OUT/sweep.csv" "$OUT/sweep.svg" \
        --title "walletd vs bare hyper, $(nproc) cores, $(date -u +%Y-%m-%d), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
        || echo "(plot-sweep.py failed; the CSV above is complete)"
fi
echo
echo "== commands ($OUT/commands.txt)"
cat "$OUT/commands.txt"
exit "$FAILED"
