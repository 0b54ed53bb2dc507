#!/usr/bin/env bash
# Recovery drill: SIGKILL walletd under load, restart it, and check that nothing acknowledged
# was lost and nothing was half-done.
#
# Builds the release binaries, then repeats --runs times: start walletd on a fresh data dir (on a
# real filesystem, fsync always, rate limits off, a fee schedule) on a free loopback port; start
# walletd-load against it with a mix of deposits, withdrawals, transfers, holds and payments
# (with partial refunds) and --survive-restart; SIGKILL walletd at a seeded random moment of
# the load window; restart it on the same data dir and port; let walletd-load audit the
# restarted server (every wallet, the merchant's included, must match what the acknowledged
# requests imply, within the bounds of the requests whose answer the kill cut off); stop walletd
# with SIGTERM (it must exit 0); copy the data dir and run `walletd replay --verify` on the copy
# (double entry, balances, holds, hash chains, nothing half-moved across shards, deterministic
# replay). A run passes when the restart was observed, the audit passed, walletd stopped cleanly
# and the replay verified. Even runs send Idempotency-Keys, odd runs do not.
#
#   scripts/drill.sh [--runs N] [--seed S] [--duration S] [--warmup S] [--connections N]
#                    [--wallets N] [--shards N] [--mix MIX] [--fee-schedule SPEC]
#                    [--survive S] [--out DIR] [--no-build]
#
# --runs N        runs (default 5)
# --seed S        seeds the kill moments and each run's load seed (default random; printed, and
#                 the same seed gives the same kill moments and load seeds again)
# --duration S    measured load seconds per run (default 8); --warmup S before it (default 1);
#                 the kill falls between 0.2 s after the load starts and 0.5 s before it ends
# --shards N      walletd --shards (default 1; 2 or more exercises cross-shard transfers and
#                 payments and their recovery)
# --mix MIX       walletd-load --mix (default deposit=25,withdraw=10,transfer=25,hold=15,payment=25)
# --fee-schedule  walletd --fee-schedule (default YER:2.5+1, so merchants net less than paid)
# --survive S     walletd-load --survive-restart (default 60)
#
# Prints one line per run and `drill: N runs, P passed, F failed (seed S)`; exits 1 if any run
# failed. Results in DIR (default target/drill/DATE): per run the walletd logs before and after
# the kill, the load generator's log and JSON summary, the replay output. A failed run's data
# dir is kept (its path is printed); everything started is stopped on exit.
set -euo pipefail

RUNS=5
SEED=""
DURATION=8
WARMUP=1
CONNECTIONS=16
WALLETS=50
SHARDS=1
MIX="deposit=25,withdraw=10,transfer=25,hold=15,payment=25"
FEES="YER:2.5+1"
SURVIVE=60
OUT=""
BUILD=1

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seed) SEED="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --wallets) WALLETS="$2"; shift 2 ;;
        --shards) SHARDS="$2"; shift 2 ;;
        --mix) MIX="$2"; shift 2 ;;
        --fee-schedule) FEES="$2"; shift 2 ;;
        --survive) SURVIVE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "drill.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*) echo "drill.sh: --runs must be a whole number" >&2; exit 2 ;; esac
if [ -z "$SEED" ]; then
    SEED="$(od -An -N4 -tu4 /dev/urandom | tr -d ' \n')"
fi
case "$SEED" in ''|*[!0-9]*) echo "drill.sh: --seed must be a whole number" >&2; exit 2 ;; esac
# The load window in ms, and the range the kill is drawn from.
WINDOW_MS="$(awk -v w="$WARMUP" -v d="$DURATION" 'BEGIN { printf "%d", (w + d) * 1000 }')"
if [ "$WINDOW_MS" -lt 1000 ]; then
    echo "drill.sh: --warmup + --duration must be at least 1 s" >&2
    exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/target/drill/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WALLETD="$ROOT/target/release/walletd"
LOAD="$ROOT/target/release/walletd-load"

# say, run, build_release, scratch_dir, wait_address, stop_pid.
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

WALLETD_PID=""
LOAD_PID=""
SCRATCH_DIRS=()
# Stops what is still running (walletd gets SIGTERM first: it drains and flushes), removes the
# data dirs of runs that passed.
cleanup() {
    local pid dir
    for pid in "$LOAD_PID" "$WALLETD_PID"; do
        stop_pid "$pid" 100
    done
    for dir in "${SCRATCH_DIRS[@]}"; do
        rm -rf "$dir"
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== drill: $(date -u +%Y-%m-%dT%H:%M:%SZ), seed $SEED, $RUNS runs, nproc $(nproc), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
echo "== results in $OUT"

if [ "$BUILD" = 1 ]; then
    build_release
fi
for binary in "$WALLETD" "$LOAD"; do
    [ -x "$binary" ] || { echo "drill.sh: $binary is missing (run without --no-build)" >&2; exit 2; }
done

# Data dirs where fsync means something: not tmpfs.
SCRATCH="$(scratch_dir drill)"
export WALLETD_ADMIN_PASSWORD="drill-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

# start_walletd DATA LISTEN LOGPREFIX: starts walletd in the background (WALLETD_PID).
start_walletd() {
    local data="$1" listen="$2" log="$3"
    say "+ WALLETD_DATA_DIR=$data WALLETD_SHARDS=$SHARDS WALLETD_RATE_LIMITS=off WALLETD_FEE_SCHEDULE=$FEES WALLETD_LOG=warn WALLETD_ADMIN_PASSWORD=\$WALLETD_ADMIN_PASSWORD $WALLETD serve --listen $listen &"
    WALLETD_DATA_DIR="$data" WALLETD_SHARDS="$SHARDS" WALLETD_RATE_LIMITS=off \
        WALLETD_FEE_SCHEDULE="$FEES" WALLETD_LOG=warn \
        "$WALLETD" serve --listen "$listen" >"$log.out" 2>"$log.err" &
    WALLETD_PID=$!
}

# stop_walletd: SIGTERM, up to 30 s to drain and flush; its exit status in STOP_RC. (Not in a
# subshell: only this shell can wait for its child.)
STOP_RC=""
stop_walletd() {
    STOP_RC=0
    kill -TERM "$WALLETD_PID" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$WALLETD_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$WALLETD_PID" 2>/dev/null; then
        kill -KILL "$WALLETD_PID" 2>/dev/null || true
        wait "$WALLETD_PID" 2>/dev/null || true
        STOP_RC="timeout (killed after 30 s)"
    else
        wait "$WALLETD_PID" 2>/dev/null || STOP_RC=$?
    fi
    WALLETD_PID=""
}

# Every draw comes from one 64-bit LCG (Knuth's MMIX constants; bash arithmetic wraps) seeded by
# --seed, not from bash's RANDOM, whose algorithm changed between bash versions: the same seed
# gives the same kill moments anywhere. draw sets DRAW to 31 bits (no subshell: the state
# must advance in this shell).
LCG_STATE=$(( SEED ^ 0x5DEECE66D ))
DRAW=0
draw() {
    LCG_STATE=$(( LCG_STATE * 6364136223846793005 + 1442695040888963407 ))
    DRAW=$(( (LCG_STATE >> 33) & 0x7fffffff ))
}
# A kill in [200 ms, window - 500 ms] after the load starts.
KILL_SPAN_MS=$(( WINDOW_MS - 700 ))
[ "$KILL_SPAN_MS" -ge 1 ] || KILL_SPAN_MS=1

PASSED=0
FAILED=0
for run_index in $(seq 1 "$RUNS"); do
    draw
    kill_ms=$(( 200 + DRAW % KILL_SPAN_MS ))
    load_seed=$(( (SEED * 1000003 + run_index) & 0x7fffffffffffffff ))
    idempotency=()
    idempotency_text="off"
    if [ $((run_index % 2)) = 0 ]; then idempotency=(--idempotency); idempotency_text="on"; fi
    name="run-$run_index"
    log="$OUT/$name"
    data="$(mktemp -d "$SCRATCH/walletd-drill.XXXXXX")"
    SCRATCH_DIRS+=("$data" "$data.copy")
    reasons=()

    start_walletd "$data" 127.0.0.1:0 "$log.walletd-1"
    if ! address="$(wait_address "$log.walletd-1.out" "$WALLETD_PID")"; then
        echo "drill: run $run_index/$RUNS FAIL: walletd did not start (see $log.walletd-1.err)"
        FAILED=$((FAILED + 1))
        stop_walletd
        continue
    fi
    port="${address##*:}"

    say "+ $LOAD --url $address --mix $MIX --connections $CONNECTIONS --wallets $WALLETS --duration $DURATION --warmup $WARMUP --seed $load_seed ${idempotency[*]} --survive-restart $SURVIVE --json > $log.json 2> $log.log &"
    "$LOAD" --url "$address" --mix "$MIX" --connections "$CONNECTIONS" --wallets "$WALLETS" \
        --duration "$DURATION" --warmup "$WARMUP" --seed "$load_seed" "${idempotency[@]}" \
        --survive-restart "$SURVIVE" --label "$name" --json >"$log.json" 2>"$log.log" &
    LOAD_PID=$!
    # The load window starts when the setup (registrations, funding, the merchant) is done.
    started=0
    for _ in $(seq 1200); do
        if grep -q '^load: started' "$log.log" 2>/dev/null; then started=1; break; fi
        kill -0 "$LOAD_PID" 2>/dev/null || break
        sleep 0.1
    done
    killed=0
    if [ "$started" = 1 ]; then
        sleep "$(awk -v ms="$kill_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
        if kill -0 "$LOAD_PID" 2>/dev/null; then
            say "+ kill -KILL $WALLETD_PID   # walletd, $kill_ms ms into the load"
            kill -KILL "$WALLETD_PID" 2>/dev/null || true
            wait "$WALLETD_PID" 2>/dev/null || true
            WALLETD_PID=""
            killed=1
            start_walletd "$data" "127.0.0.1:$port" "$log.walletd-2"
            if ! wait_address "$log.walletd-2.out" "$WALLETD_PID" >/dev/null; then
                reasons+=("walletd did not restart on port $port (see $log.walletd-2.err)")
            fi
        else
            reasons+=("the load generator ended before the kill")
        fi
    else
        reasons+=("the load generator's setup did not finish (see $log.log)")
    fi

    # The load generator audits the restarted server; give it the load, the wait and the audit.
    load_rc=0
    limit=$(( WINDOW_MS / 1000 + SURVIVE + 180 ))
    for _ in $(seq $((limit * 10))); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$LOAD_PID" 2>/dev/null; then
        kill -KILL "$LOAD_PID" 2>/dev/null || true
        reasons+=("the load generator did not finish within $limit s")
    fi
    wait "$LOAD_PID" 2>/dev/null || load_rc=$?
    LOAD_PID=""

    stop_rc="not running"
    if [ -n "$WALLETD_PID" ]; then stop_walletd; stop_rc="$STOP_RC"; fi
    if [ "$stop_rc" != 0 ]; then reasons+=("walletd's graceful stop: exit $stop_rc"); fi

    # The replay, on a copy: the data dir stays as the drill left it.
    replay_rc=0
    cp -a "$data" "$data.copy"
    say "+ $WALLETD replay --verify --data-dir $data.copy --shards $SHARDS"
    "$WALLETD" replay --verify --data-dir "$data.copy" --shards "$SHARDS" >"$log.replay" 2>&1 || replay_rc=$?
    if [ "$replay_rc" != 0 ]; then
        reasons+=("replay --verify exited $replay_rc: $(tail -1 "$log.replay")")
    fi

    audit="no summary"
    observed="false"
    back=""
    if [ -s "$log.json" ] && jq -e . "$log.json" >/dev/null 2>&1; then
        audit="$(jq -r 'if .audit == null then "not run" elif .audit.ok then "OK over \(.audit.wallets) wallets (\(.audit.unknown_requests) unknown outcomes)" else "FAILED (\(.audit.mismatches | length) mismatches)" end' "$log.json")"
        observed="$(jq -r '.restart.observed // false' "$log.json")"
        back="$(jq -r '.restart.back_after_s // empty | . * 100 | round / 100' "$log.json")"
    fi
    if [ "$load_rc" != 0 ]; then
        reasons+=("walletd-load exited $load_rc (1: the audit failed, 2: it could not finish; see $log.log)")
    fi
    if [ "$killed" = 1 ] && [ "$observed" != true ]; then
        reasons+=("the load generator did not observe the restart")
    fi

    summary="killed $kill_ms ms into the load (load seed $load_seed, idempotency $idempotency_text), restart $([ "$observed" = true ] && echo "observed${back:+ (back after $back s)}" || echo "not observed"), audit $audit, walletd stop exit $stop_rc, replay --verify $([ "$replay_rc" = 0 ] && echo OK || echo "FAILED ($replay_rc)")"
    if [ "${#reasons[@]}" = 0 ]; then
        PASSED=$((PASSED + 1))
        echo "drill: run $run_index/$RUNS PASS: $summary"
    else
        FAILED=$((FAILED + 1))
        # Keep the evidence: drop this run's dirs from the cleanup list.
        SCRATCH_DIRS=("${SCRATCH_DIRS[@]:0:${#SCRATCH_DIRS[@]}-2}")
        echo "drill: run $run_index/$RUNS FAIL: $summary"
        for reason in "${reasons[@]}"; do echo "  - $reason"; done
        echo "  data dir kept: $data (replayed copy: $data.copy); logs: $log.*"
    fi
done

echo "drill: $RUNS runs, $PASSED passed, $FAILED failed (seed $SEED)"
[ "$FAILED" = 0 ]
