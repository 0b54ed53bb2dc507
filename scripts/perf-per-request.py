#!/usr/bin/env python3
"""Hardware counters per request over a soak.

    scripts/perf-per-request.py DIR

DIR is a soak's --out with DIR/perf-windows.txt from `scripts/soak-sampler.sh DIR --perf`:
10-second `perf stat` windows of walletd with the HTTP requests it answered at each end. For
every window it prints the request rate, and walletd's cycles, instructions, cache misses and
dTLB load misses per request, with instructions per cycle. If a late request costs more cycles
for the same instructions, each runs slower (cache, TLB, another tenant); if it runs more
instructions, walletd does more work for it.
"""
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = f"{sys.argv[1]}/perf-windows.txt"
    print(f"{'window s':>9} {'req/s':>7} {'kcycles':>8} {'kinstr':>8} {'IPC':>5} "
          f"{'cache miss':>10} {'dTLB miss':>9}   (per request)")
    with open(path) as f:
        f.readline()
        for line in f:
            cols = line.split()
            try:
                start, end, r0, r1, cycles, instr, misses, dtlb = (float(c) for c in cols[:8])
            except ValueError:
                continue  # a window perf could not count ("<not counted>") or cut short
            n = r1 - r0
            if n <= 0 or cycles <= 0 or end <= start:
                continue
            print(f"{start:>4.0f}-{end:<4.0f} {n / (end - start):>7.0f} {cycles / n / 1e3:>8.1f} "
                  f"{instr / n / 1e3:>8.1f} {instr / cycles:>5.2f} {misses / n:>10.0f} "
                  f"{dtlb / n:>9.0f}")


if __name__ == "__main__":
    main()
