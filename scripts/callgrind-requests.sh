#!/usr/bin/env bash
# Instructions per request: walletd under callgrind, the soak's keyed mix for 40 s, counted
# from the moment the load generator's setup is done until it stops. callgrind counts
# instructions, not time, so the figure repeats on this noisy machine where CPU time does not
# (BENCHMARKS.md); compare builds in alternation, A B A B.
#
#   scripts/callgrind-requests.sh [--walletd BIN] [--name NAME] [--duration S] [--out DIR]
#
# BIN defaults to target/release/walletd (build it first: scripts/soak.sh --help says how);
# walletd-load is target/release/walletd-load. The last line printed is
#   NAME requests=N instructions=I per_request=I/N sha256_per_request=S
# where S is the part in sha2's compression function: under valgrind it runs its portable code
# (no SHA extensions), so it weighs several times more than on the machine itself.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BIN="$ROOT/target/release/walletd"
NAME="walletd"
DURATION=40
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --walletd) BIN="$2"; shift 2 ;;
        --name) NAME="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "callgrind-requests: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "callgrind-requests: valgrind is not installed" >&2; exit 1; }
OUT="${OUT:-$ROOT/target/callgrind/$NAME-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
: > "$OUT/commands.txt"
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

DATA="$(mktemp -d "$(scratch_dir callgrind)/walletd-callgrind.XXXXXX")"
WALLETD_ADMIN_PASSWORD="callgrind-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export WALLETD_ADMIN_PASSWORD
VALGRIND_PID=""
LOAD_PID=""
cleanup() {
    [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
    [ -n "$VALGRIND_PID" ] && kill "$VALGRIND_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$DATA"
}
trap cleanup EXIT

say "+ WALLETD_DATA_DIR=$DATA WALLETD_RATE_LIMITS=off WALLETD_FEE_SCHEDULE=YER:2.5+1 valgrind --tool=callgrind --instr-atstart=no $BIN serve --listen 127.0.0.1:0 &"
WALLETD_DATA_DIR="$DATA" WALLETD_RATE_LIMITS=off WALLETD_FEE_SCHEDULE=YER:2.5+1 WALLETD_LOG=warn \
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/callgrind.out" \
    "$BIN" serve --listen 127.0.0.1:0 > "$OUT/walletd.log" 2>&1 &
VALGRIND_PID=$!
ADDR="$(wait_address "$OUT/walletd.log" "$VALGRIND_PID" 1200)"
URL="$ADDR"

requests() {
    curl -sf --max-time 10 "$URL/metrics" \
        | awk '/^walletd_http_requests_total/ && !/operation="metrics"/ { s += $2 } END { print s + 0 }'
}

say "+ target/release/walletd-load --url $URL --mix transfer=40,deposit=25,hold=15,payment=20 --idempotency --connections 16 --wallets 100 --duration $DURATION --warmup 0 &"
"$ROOT/target/release/walletd-load" --url "$URL" --mix transfer=40,deposit=25,hold=15,payment=20 \
    --idempotency --connections 16 --wallets 100 --duration "$DURATION" --warmup 0 --json \
    > "$OUT/load.json" 2> "$OUT/load.log" &
LOAD_PID=$!
# The load generator says "load: started" once its customers are registered and funded.
until grep -q '^load: started' "$OUT/load.log"; do
    kill -0 "$LOAD_PID" 2>/dev/null || { echo "callgrind-requests: the load generator stopped during setup (see $OUT/load.log)" >&2; exit 1; }
    sleep 0.5
done
BEFORE="$(requests)"
callgrind_control -i on "$VALGRIND_PID" > /dev/null
wait "$LOAD_PID" || { echo "callgrind-requests: the load generator failed (see $OUT/load.log)" >&2; exit 1; }
LOAD_PID=""
callgrind_control -i off "$VALGRIND_PID" > /dev/null
AFTER="$(requests)"
callgrind_control -d "$VALGRIND_PID" > /dev/null
kill -TERM "$VALGRIND_PID"
wait "$VALGRIND_PID" || true
VALGRIND_PID=""

# The dump holds the counted window; the file written at exit holds the rest (nothing counted).
DUMP="$(ls -S "$OUT"/callgrind.out* | head -1)"
callgrind_annotate "$DUMP" > "$OUT/annotate.txt" 2>/dev/null
TOTAL="$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }' "$OUT/annotate.txt")"
SHA="$(awk '/sha2::sha256::compress256/ { gsub(",", "", $1); s += $1 } END { print s + 0 }' "$OUT/annotate.txt")"
COUNT=$((AFTER - BEFORE))
[ "$COUNT" -gt 0 ] || { echo "callgrind-requests: no request was answered in the window" >&2; exit 1; }
echo "$NAME requests=$COUNT instructions=$TOTAL per_request=$((TOTAL / COUNT)) sha256_per_request=$((SHA / COUNT))" \
    | tee "$OUT/result.txt"
