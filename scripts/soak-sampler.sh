#!/usr/bin/env bash
# CPU beside a soak: every 5 s, where the machine's and walletd's CPU goes.
#
#   scripts/soak.sh --duration 600 --no-build --out DIR &
#   scripts/soak-sampler.sh DIR [--perf]
#
# Waits for the walletd of DIR/commands.txt ("# walletd pid N at URL"), then until it exits
# appends to DIR/sampler.txt one line every 5 s: seconds since it started, the machine's busy
# and iowait ticks (/proc/stat, all CPUs), walletd's and walletd-load's utime + stime ticks,
# the WAL's fsyncs, fsync seconds and records and the HTTP requests answered (walletd's
# /metrics, its own scrapes included), and each walletd thread's
# utime + stime ticks by name (threads of one name summed by whoever reads them). Every value
# is a running total: differences between lines give rates (ticks are 1/100 s). "steal" is
# the ticks the hypervisor gave this VM's CPUs to someone else (also counted in "busy").
#
# --perf also counts walletd's cycles, instructions, cache misses and dTLB load misses in a
# 10-second window every 60 s (`perf stat -p`), and appends one line per window to
# DIR/perf-windows.txt: start and end (seconds since the sampler started), HTTP requests
# answered by then, and the counts. Windows, not one long count: on this VM every context
# switch of a counted thread saves and restores the virtual PMU, and a count over the whole
# run halved walletd's rate (BENCHMARKS.md). `scripts/perf-per-request.py DIR` divides the
# counts by the window's requests: whether a late request costs more because it runs more
# instructions or because each runs slower (a larger working set, another tenant's cache).
set -euo pipefail
OUT="${1:-}"
PERF=0
[ "${2:-}" = "--perf" ] && PERF=1
[ -n "$OUT" ] || { echo "usage: scripts/soak-sampler.sh DIR [--perf], DIR the --out of a running soak" >&2; exit 2; }
for _ in $(seq 120); do
    grep -q 'walletd pid' "$OUT/commands.txt" 2>/dev/null && break
    sleep 1
done
PID="$(grep -o 'walletd pid [0-9]*' "$OUT/commands.txt" | head -1 | awk '{print $3}')"
URL="$(grep -o 'at http://[0-9.:]*' "$OUT/commands.txt" | head -1 | cut -c4-)"
[ -n "$PID" ] && [ -n "$URL" ] || { echo "soak-sampler: no walletd in $OUT/commands.txt" >&2; exit 1; }
requests() {
    curl -sf --max-time 2 "$URL/metrics" 2>/dev/null \
        | awk '/^walletd_http_requests_total/ {r += $2} END {print r + 0}' || echo 0
}
T0=$(date +%s)
if [ "$PERF" = 1 ]; then
    echo "start end requests_start requests_end cycles instructions cache_misses dtlb_misses" \
        > "$OUT/perf-windows.txt"
    (
        while sleep 50 && kill -0 "$PID" 2>/dev/null; do
            start=$(( $(date +%s) - T0 )); r0="$(requests)"
            counts="$(perf stat -x, -e cycles,instructions,cache-misses,dTLB-load-misses -p "$PID" \
                -- sleep 10 2>&1 >/dev/null | awk -F, '$4 != "" {printf "%s ", $1}')"
            r1="$(requests)"; end=$(( $(date +%s) - T0 ))
            kill -0 "$PID" 2>/dev/null && echo "$start $end $r0 $r1 $counts" >> "$OUT/perf-windows.txt"
        done
    ) &
fi
echo "t busy iowait steal walletd_ticks load_ticks fsyncs fsync_s records requests threads" > "$OUT/sampler.txt"
while kill -0 "$PID" 2>/dev/null; do
    read -r _ user nice system _ iowait irq softirq steal _ < /proc/stat
    walletd="$(awk '{print $14 + $15}' "/proc/$PID/stat" 2>/dev/null || echo 0)"
    load_pid="$(pgrep -f walletd-load | head -1 || true)"
    load=0
    [ -n "$load_pid" ] && load="$(awk '{print $14 + $15}' "/proc/$load_pid/stat" 2>/dev/null || echo 0)"
    wal="$(curl -sf --max-time 2 "$URL/metrics" 2>/dev/null \
        | awk '/^walletd_wal_fsyncs_total / {a = $2} /^walletd_wal_fsync_seconds_total / {b = $2}
               /^walletd_wal_records_total / {c = $2} /^walletd_http_requests_total/ {r += $2}
               END {print a + 0, b + 0, c + 0, r + 0}' || echo "0 0 0 0")"
    threads="$(for task in /proc/"$PID"/task/*; do
        awk '{name = $2; gsub(/[() ]/, "", name); printf "%s=%d,", name, $14 + $15}' "$task/stat" 2>/dev/null || true
    done)"
    echo "$(( $(date +%s) - T0 )) $((user + nice + system + irq + softirq + steal)) $iowait $steal $walletd $load $wal $threads" \
        >> "$OUT/sampler.txt"
    sleep 5
done
