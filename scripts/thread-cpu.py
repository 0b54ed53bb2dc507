#!/usr/bin/env python3
"""CPU a request of each walletd thread over a soak, by windows.

    scripts/thread-cpu.py DIR [WINDOW_SECONDS]

Reads DIR/sampler.txt, written by `scripts/soak-sampler.sh DIR` beside a soak (running totals
every 5 s: the HTTP requests answered and each thread's utime + stime ticks by name), and prints
one line per window (120 s unless told): its span, the requests a second, and for each thread
name (threads of one name summed; `fjall:worker` and `actix-rt|system` shortened to `fjall` and
`actix-rt`) the microseconds of CPU it spent per request answered in the window. A thread whose
cost a request grows over the soak is work that grows with history; the whole-process total
drifts between runs on this machine, a thread's share much less (BENCHMARKS.md, "Writes in key
order"). The first window holds the load generator's registrations and funding.
"""
import collections
import sys


def rows(path):
    """(seconds, requests, ticks by thread name) for every complete line of sampler.txt."""
    out = []
    with open(path) as lines:
        header = next(lines).split()
        at = {name: index for index, name in enumerate(header)}
        for line in lines:
            fields = line.split()
            if len(fields) < len(header):
                continue
            ticks = collections.Counter()
            for pair in fields[at["threads"]].strip(",").split(","):
                name, _, value = pair.rpartition("=")
                if name and value.isdigit():
                    ticks[name.split(":")[0].split("|")[0]] += int(value)
            out.append((int(fields[at["t"]]), float(fields[at["requests"]]), ticks))
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    window = int(sys.argv[2]) if len(sys.argv) == 3 else 120
    samples = rows(f"{sys.argv[1]}/sampler.txt")
    start = 0
    while start < len(samples) - 1:
        end = start
        while end + 1 < len(samples) and samples[end + 1][0] - samples[start][0] <= window:
            end += 1
        if end == start:
            end += 1
        (t0, r0, k0), (t1, r1, k1) = samples[start], samples[end]
        answered = r1 - r0
        if answered > 0 and t1 > t0:
            # Ticks are 1/100 s: 10,000 µs each.
            costs = {name: (k1[name] - k0.get(name, 0)) * 10_000 / answered for name in k1}
            shown = " ".join(
                f"{name}={cost:.1f}" for name, cost in sorted(costs.items()) if cost >= 0.5
            )
            print(f"{t0:5d}-{t1:5d} s  {answered / (t1 - t0):7.0f} req/s  "
                  f"total {sum(costs.values()):6.1f}  {shown}")
        start = end


if __name__ == "__main__":
    main()
