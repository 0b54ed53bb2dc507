#!/usr/bin/env python3
"""Latency of a request that touches nothing, beside a load.

usage: scripts/health-probe.py URL SECONDS

Asks GET URL/v1/health every 5 ms over one keep-alive connection for SECONDS, then prints the
answers' p50, p99, p99.9 and max in ms and how many took over 100 ms. Started beside
scripts/soak.sh (with walletd's address from its log), it shows whether walletd as a whole
stops answering while the load's requests wait on something (BENCHMARKS.md, "Both HTTP workers
in one store lock"). A refused or failed request is counted and the connection reopened.
"""
import http.client
import sys
import time
import urllib.parse


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    url, seconds = sys.argv[1], float(sys.argv[2])
    parts = urllib.parse.urlparse(url)
    connect = lambda: http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn = connect()
    latencies, failures = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            conn.request("GET", "/v1/health")
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                failures += 1
        except (OSError, http.client.HTTPException):
            # Paced like an answer: a refused connect returns at once, and a probe that outlives
            # walletd by a few seconds counted tens of thousands of failures in them.
            failures += 1
            conn.close()
            conn = connect()
            time.sleep(0.005)
            continue
        latencies.append((time.monotonic() - started) * 1000)
        time.sleep(0.005)
    if not latencies:
        sys.exit("health: no answer in %.0f s (%d failures)" % (seconds, failures))
    latencies.sort()
    at = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print("health: %d requests, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms, "
          "over 100 ms %d, failed %d" % (len(latencies), at(0.5), at(0.99), at(0.999),
                                         latencies[-1], sum(x > 100 for x in latencies), failures))


if __name__ == "__main__":
    main()
