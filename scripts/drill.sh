#!/usr/bin/env bash
# Recovery drill: SIGKILL walletd under load, restart it, and check that nothing acknowledged
# was lost and nothing was half-done.
#
# Builds the release binaries, then repeats --runs times: start walletd on a fresh data dir under
# target/drill (a real filesystem, not tmpfs; fsync always, rate limits off, a fee schedule, 2
# shards) on a free loopback port; start walletd-load against it with a mix of deposits,
# transfers, withdrawals, holds and payments (with partial refunds) and --state-out STATE;
# SIGKILL walletd a seeded random 1..D-1 seconds into the load; wait for walletd-load (it stops
# issuing load, counts the requests in flight as unknown outcomes, writes the audit model to
# STATE and exits 3; one that finished before the kill is a run where the kill came late: its
# state is audited all the same); restart walletd on the same data dir and address; run
# `walletd-load audit --state STATE` against it (every wallet, the merchant's included, must
# match what the acknowledged requests imply, within the bounds of the requests whose answer
# the kill cut off); stop walletd with SIGTERM; copy the data dir and run
# `walletd replay --verify` on the copy (double entry, balances, holds, hash chains, nothing
# half-moved across shards, deterministic replay). A run passes when the audit and the replay
# both exit 0. Even runs send Idempotency-Keys, odd runs do not.
#
#   scripts/drill.sh [--runs N] [--seed S] [--duration S] [--warmup S] [--connections N]
#                    [--wallets N] [--shards N] [--mix MIX] [--fee-schedule SPEC]
#                    [--out DIR] [--no-build]
#
# --runs N        runs (default 5)
# --seed S        seeds the kill moments and each run's load seed (default random; printed, and
#                 the same seed gives the same kill moments and load seeds again)
# --duration S    load seconds per run, a whole number >= 2 (default 8); the kill comes 1..S-1
#                 whole seconds after the load starts (after the setup; --warmup, default 1,
#                 is part of walletd-load's window, so a late kill may find the load finished)
# --shards N      walletd --shards (default 2: cross-shard transfers and payments and their
#                 recovery)
# --mix MIX       walletd-load --mix (default deposit=30,transfer=30,withdraw=10,hold=10,payment=20)
# --fee-schedule  walletd --fee-schedule (default YER:2.5+1, so merchants net less than paid)
#
# Prints one line per run (`run 3/5: killed after 4 s, audit OK, replay --verify OK`) and
# `drill: N runs, P passed, F failed (seed S)`; exits 1 if any run failed. Results in DIR
# (default target/drill/DATE): per run the walletd logs before and after the kill, the load
# generator's log, its state file, the audit's and the replay's output. A failed run's data dir
# is kept (its path is printed); everything started is stopped on exit.
set -euo pipefail

RUNS=5
SEED=""
DURATION=8
WARMUP=1
CONNECTIONS=16
WALLETS=50
SHARDS=2
MIX="deposit=30,transfer=30,withdraw=10,hold=10,payment=20"
FEES="YER:2.5+1"
OUT=""
BUILD=1

usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }

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
case "$DURATION" in ''|*[!0-9]*) echo "drill.sh: --duration must be a whole number of seconds" >&2; exit 2 ;; esac
if [ "$DURATION" -lt 2 ]; then
    echo "drill.sh: --duration must be at least 2 s (the kill comes 1..duration-1 s in)" >&2
    exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/target/drill/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WALLETD="$ROOT/target/release/walletd"
LOAD="$ROOT/target/release/walletd-load"

say() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
run() { say "+ $*"; "$@"; }

WALLETD_PID=""
LOAD_PID=""
SCRATCH_DIRS=()
# Stops what is still running (walletd gets SIGTERM first: it drains and flushes), removes the
# data dirs of runs that passed.
cleanup() {
    local pid dir
    for pid in "$LOAD_PID" "$WALLETD_PID"; do
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
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
    # Two commands, as in bench-http.sh: built together, cargo would unify hyper's features
    # across api and walletd-benches and rebuild api.
    run cargo build --release -p api --bin walletd
    run cargo build --release -p walletd-benches --bin walletd-load
fi
for binary in "$WALLETD" "$LOAD"; do
    [ -x "$binary" ] || { echo "drill.sh: $binary is missing (run without --no-build)" >&2; exit 2; }
done

# Data dirs where fsync means something: under target/drill, not tmpfs.
SCRATCH="$ROOT/target/drill/data"
mkdir -p "$SCRATCH"
export WALLETD_ADMIN_PASSWORD="drill-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

# Waits for "... listening on http://ADDR" in $1 from process $2; prints ADDR.
wait_address() {
    local file="$1" pid="$2" address=""
    for _ in $(seq 600); do
        address="$(grep -o 'http://[0-9.:]*' "$file" 2>/dev/null | head -1 || true)"
        if [ -n "$address" ]; then echo "$address"; return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then break; fi
        sleep 0.1
    done
    return 1
}

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

PASSED=0
FAILED=0
for run_index in $(seq 1 "$RUNS"); do
    draw
    kill_s=$(( 1 + DRAW % (DURATION - 1) ))
    load_seed=$(( (SEED * 1000003 + run_index) & 0x7fffffffffffffff ))
    idempotency=()
    if [ $((run_index % 2)) = 0 ]; then idempotency=(--idempotency); fi
    name="run-$run_index"
    log="$OUT/$name"
    state="$log.state.json"
    data="$(mktemp -d "$SCRATCH/walletd-drill.XXXXXX")"
    SCRATCH_DIRS+=("$data" "$data.copy")
    reasons=()
    rm -f "$state"

    start_walletd "$data" 127.0.0.1:0 "$log.walletd-1"
    if ! address="$(wait_address "$log.walletd-1.out" "$WALLETD_PID")"; then
        echo "run $run_index/$RUNS: FAIL: walletd did not start (see $log.walletd-1.err)"
        FAILED=$((FAILED + 1))
        stop_walletd
        continue
    fi
    listen="${address#http://}"

    say "+ $LOAD --url $address --mix $MIX --connections $CONNECTIONS --wallets $WALLETS --duration $DURATION --warmup $WARMUP --seed $load_seed ${idempotency[*]} --state-out $state > $log.load.out 2> $log.load.err &"
    "$LOAD" --url "$address" --mix "$MIX" --connections "$CONNECTIONS" --wallets "$WALLETS" \
        --duration "$DURATION" --warmup "$WARMUP" --seed "$load_seed" "${idempotency[@]}" \
        --label "$name" --state-out "$state" >"$log.load.out" 2>"$log.load.err" &
    LOAD_PID=$!
    # The load starts when the setup (registrations, funding, the merchant) is done.
    started=0
    for _ in $(seq 1200); do
        if grep -q '^load: started' "$log.load.err" 2>/dev/null; then started=1; break; fi
        kill -0 "$LOAD_PID" 2>/dev/null || break
        sleep 0.1
    done
    killed=""
    late=""
    if [ "$started" = 1 ]; then
        sleep "$kill_s"
        say "+ kill -KILL $WALLETD_PID   # walletd, $kill_s s into the load"
        kill -KILL "$WALLETD_PID" 2>/dev/null || true
        wait "$WALLETD_PID" 2>/dev/null || true
        WALLETD_PID=""
        killed="killed after $kill_s s"
    else
        killed="not killed"
        reasons+=("the load generator's setup did not finish (see $log.load.err)")
    fi

    # walletd-load stops at the first connection error; give it its window and a margin.
    load_rc=0
    limit="$(awk -v w="$WARMUP" -v d="$DURATION" 'BEGIN { printf "%d", w + d + 120 }')"
    for _ in $(seq $((limit * 10))); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$LOAD_PID" 2>/dev/null; then
        kill -KILL "$LOAD_PID" 2>/dev/null || true
        reasons+=("walletd-load did not finish within $limit s")
    fi
    wait "$LOAD_PID" 2>/dev/null || load_rc=$?
    LOAD_PID=""
    # 3: it saw the server go away and wrote its state. 0 (or 2, its own read-back cut off by
    # the kill) with a state that says the server never went away: the load had finished, the
    # kill came late; the state is audited all the same.
    went_away="$(jq -r '.server_went_away' "$state" 2>/dev/null || echo '?')"
    case "$load_rc/$went_away" in
        3/true) ;;
        0/false|2/false) late=" (late: the load had finished)" ;;
        *) reasons+=("walletd-load exited $load_rc, state server_went_away=$went_away (1: its own audit failed, 2: it could not finish; see $log.load.err)") ;;
    esac
    killed="$killed$late"

    audit="not run"
    if [ "$started" = 1 ]; then
        start_walletd "$data" "$listen" "$log.walletd-2"
        if ! wait_address "$log.walletd-2.out" "$WALLETD_PID" >/dev/null; then
            reasons+=("walletd did not restart on $listen (see $log.walletd-2.err)")
        fi
        if [ -s "$state" ]; then
            audit_rc=0
            say "+ $LOAD audit --state $state --url $address > $log.audit 2>&1"
            "$LOAD" audit --state "$state" --url "$address" >"$log.audit" 2>&1 || audit_rc=$?
            case "$audit_rc" in
                0) audit="OK" ;;
                1) audit="FAILED"; reasons+=("audit: $(grep -m1 '^audit:' "$log.audit")") ;;
                *) audit="not done ($audit_rc)"; reasons+=("walletd-load audit exited $audit_rc: $(tail -1 "$log.audit")") ;;
            esac
        else
            reasons+=("walletd-load wrote no state to $state")
        fi
    fi

    if [ -n "$WALLETD_PID" ]; then
        stop_walletd
        if [ "$STOP_RC" != 0 ]; then reasons+=("walletd's graceful stop: exit $STOP_RC"); fi
    fi

    # The replay, on a copy: the data dir stays as the drill left it.
    replay="OK"
    replay_rc=0
    cp -a "$data" "$data.copy"
    say "+ $WALLETD replay --verify --data-dir $data.copy --shards $SHARDS"
    "$WALLETD" replay --verify --data-dir "$data.copy" --shards "$SHARDS" >"$log.replay" 2>&1 || replay_rc=$?
    if [ "$replay_rc" != 0 ]; then
        replay="FAILED ($replay_rc)"
        reasons+=("replay --verify exited $replay_rc: $(tail -1 "$log.replay")")
    fi

    line="run $run_index/$RUNS: $killed, audit $audit, replay --verify $replay"
    if [ "${#reasons[@]}" = 0 ]; then
        PASSED=$((PASSED + 1))
        echo "$line"
    else
        FAILED=$((FAILED + 1))
        # Keep the evidence: drop this run's dirs from the cleanup list.
        SCRATCH_DIRS=("${SCRATCH_DIRS[@]:0:${#SCRATCH_DIRS[@]}-2}")
        echo "$line: FAIL (load seed $load_seed)"
        for reason in "${reasons[@]}"; do echo "  - $reason"; done
        echo "  data dir kept: $data (replayed copy: $data.copy); logs: $log.*"
    fi
done

echo "drill: $RUNS runs, $PASSED passed, $FAILED failed (seed $SEED)"
[ "$FAILED" = 0 ]
