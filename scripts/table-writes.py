#!/usr/bin/env python3
"""Bytes of table and blob files a running walletd's history store writes, per keyspace.

    scripts/table-writes.py DATA_DIR/history/keyspaces SECONDS

Polls the keyspace directories every 0.2 s for SECONDS and sums, per keyspace, the last seen
size of every table or blob file that appeared meanwhile: what flushes and compactions wrote
(a file created and deleted between two polls is missed; tables take longer than that to
write). Keyspaces are numbered in the order `HistoryStore::open` creates them (1 `meta`,
2 `transactions_by_epoch`, 3 `entries_by_epoch`, ...). Used for BENCHMARKS.md, "Epoch-first
keys": which keyspaces' compaction grows as the store does.
"""
import os
import sys
import time


def scan(root):
    sizes = {}
    for keyspace in os.listdir(root):
        for kind in ("tables", "blobs"):
            folder = os.path.join(root, keyspace, kind)
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                try:
                    sizes[(keyspace, kind, name)] = os.path.getsize(os.path.join(folder, name))
                except OSError:
                    pass
    return sizes


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, seconds = sys.argv[1], float(sys.argv[2])
    before = scan(root)
    written = {}
    end = time.time() + seconds
    while time.time() < end:
        for key, size in scan(root).items():
            if key not in before:
                written[key] = max(written.get(key, 0), size)
        time.sleep(0.2)
    totals = {}
    for (keyspace, kind, _), size in written.items():
        bytes_, files = totals.get((keyspace, kind), (0, 0))
        totals[(keyspace, kind)] = (bytes_ + size, files + 1)
    for (keyspace, kind), (bytes_, files) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{keyspace:>3} {kind:6} {bytes_ / 2**20:8.1f} MiB  files {files}")


if __name__ == "__main__":
    main()
