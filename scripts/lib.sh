# Shared by scripts/bench-http.sh and scripts/drill.sh (sourced, not run). Expects OUT (the
# results dir, for commands.txt) and ROOT (the repository) to be set by the caller.

# Prints a command line, and keeps it in $OUT/commands.txt.
say() { printf '%s\n' "$*" | tee -a "$OUT/commands.txt" >&2; }
# Prints, then runs.
run() { say "+ $*"; "$@"; }

# Builds the release walletd and walletd-load. Two commands, not one: built together, cargo would
# unify hyper's features across api and walletd-benches and rebuild api with the client half it
# does not need.
build_release() {
    run cargo build --release -p api --bin walletd
    run cargo build --release -p walletd-benches --bin walletd-load
}

# Prints a scratch dir where fsync means something (not tmpfs): $TMPDIR or /tmp, else
# $ROOT/target/$1-scratch.
scratch_dir() {
    local scratch="${TMPDIR:-/tmp}"
    case "$(findmnt -n -o FSTYPE -T "$scratch" 2>/dev/null || stat -f -c %T "$scratch")" in
        tmpfs|ramfs) scratch="$ROOT/target/$1-scratch" ;;
    esac
    mkdir -p "$scratch"
    echo "$scratch"
}

# Waits for "... listening on http://ADDR" in file $1 from process $2 (up to $3 tenths of a
# second, default 600); prints ADDR, or fails when the process died or time ran out.
wait_address() {
    local file="$1" pid="$2" tenths="${3:-600}" address=""
    for _ in $(seq "$tenths"); do
        address="$(grep -o 'http://[0-9.:]*' "$file" 2>/dev/null | head -1 || true)"
        if [ -n "$address" ]; then echo "$address"; return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then break; fi
        sleep 0.1
    done
    echo "no listening address in $file" >&2
    return 1
}

# Stops process $1: SIGTERM (walletd drains and flushes), then SIGKILL after $2 tenths of a
# second (default 50).
stop_pid() {
    local pid="$1" tenths="${2:-50}"
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "$tenths"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
