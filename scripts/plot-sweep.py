#!/usr/bin/env python3
"""Plots a connections sweep of scripts/bench-http.sh as one SVG: throughput and p99 latency
against connection count, walletd beside the bare hyper baseline measured in the same run.

    scripts/plot-sweep.py target/bench-http/DATE/sweep.csv docs/bench/http-sweep.svg \
        --title "walletd vs bare hyper, 2 cores, 2026-11-24"

Reads the CSV walletd-load appends (columns target, mix, connections, rps, p99_us, audit, ...),
one series per (target, operation). Standard library only: no plotting package to install, and
the SVG is plain text that diffs and renders anywhere. A series whose audit failed is drawn
dashed and named as failed in the legend, so a bad run cannot pass for a good one.
"""

import argparse
import csv
import math
import sys
from collections import defaultdict
from xml.sax.saxutils import escape

COLOURS = {
    ("walletd", "deposit"): "#1f77b4",
    ("walletd", "transfer"): "#d62728",
    ("walletd", "payment"): "#2ca02c",
    ("baseline", "deposit"): "#7fb3d5",
    ("baseline", "transfer"): "#f1948a",
    ("baseline", "payment"): "#82e0aa",
}
FALLBACK = ["#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]

WIDTH, HEIGHT = 960, 430
PANEL_W, PANEL_H = 380, 300
LEFT = [80, 560]
TOP = 60


def load(path):
    series = defaultdict(dict)
    failed = set()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            operation = row["mix"].split("=")[0].split(",")[0]
            key = (row["target"], operation)
            connections = int(row["connections"])
            series[key][connections] = (float(row["rps"]), float(row["p99_us"]) / 1000.0)
            if row.get("audit") == "failed":
                failed.add(key)
    if not series:
        sys.exit(f"plot-sweep: no rows in {path}")
    return series, failed


def nice_max(value):
    if value <= 0:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return 10 * exponent


def panel(out, x0, title, ylabel, xs, series, failed, pick, log_y):
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{TOP - 12}" text-anchor="middle" '
               f'font-weight="bold">{escape(title)}</text>')
    out.append(f'<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" '
               'fill="none" stroke="#333"/>')
    lx = [math.log2(x) for x in xs]
    x_min, x_max = min(lx), max(lx)
    span = (x_max - x_min) or 1.0

    def px(c):
        return x0 + (math.log2(c) - x_min) / span * PANEL_W

    values = [pick(v) for s in series.values() for v in s.values() if pick(v) > 0]
    if log_y:
        y_lo = 10 ** math.floor(math.log10(min(values)))
        y_hi = 10 ** math.ceil(math.log10(max(values)))
        ticks = []
        t = y_lo
        while t <= y_hi * 1.0001:
            ticks.append(t)
            t *= 10

        def py(v):
            v = max(v, y_lo)
            return TOP + PANEL_H - (math.log10(v) - math.log10(y_lo)) / (
                math.log10(y_hi) - math.log10(y_lo)) * PANEL_H
    else:
        y_hi = nice_max(max(values) * 1.05)
        ticks = [y_hi * i / 5 for i in range(6)]

        def py(v):
            return TOP + PANEL_H - v / y_hi * PANEL_H

    for t in ticks:
        y = py(t)
        label = f"{t:g}" if log_y else f"{t / 1000:g}k"
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{label}</text>')
    for c in xs:
        x = px(c)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + PANEL_H}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + PANEL_H + 16}" text-anchor="middle" font-size="11">{c}</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{TOP + PANEL_H + 34}" text-anchor="middle" '
               'font-size="12">connections (keep-alive, one request in flight each)</text>')
    out.append(f'<text x="{x0 - 52}" y="{TOP + PANEL_H / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 {x0 - 52} {TOP + PANEL_H / 2})">{escape(ylabel)}</text>')

    for index, (key, points) in enumerate(sorted(series.items())):
        colour = COLOURS.get(key, FALLBACK[index % len(FALLBACK)])
        dash = ' stroke-dasharray="6 4"' if key in failed else ""
        coords = " ".join(f"{px(c):.1f},{py(pick(v)):.1f}" for c, v in sorted(points.items()))
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for c, v in sorted(points.items()):
            out.append(f'<circle cx="{px(c):.1f}" cy="{py(pick(v)):.1f}" r="3" fill="{colour}"/>')


def render(series, failed, title):
    xs = sorted({c for points in series.values() for c in points})
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="13">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    panel(out, LEFT[0], "throughput", "requests/s", xs, series, failed, lambda v: v[0], False)
    panel(out, LEFT[1], "p99 latency", "p99 ms (log scale)", xs, series, failed, lambda v: v[1], True)
    y = TOP + PANEL_H + 56
    x = 80
    for index, key in enumerate(sorted(series)):
        colour = COLOURS.get(key, FALLBACK[index % len(FALLBACK)])
        name = f"{key[0]} {key[1]}" + (" (audit FAILED)" if key in failed else "")
        out.append(f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{x + 30}" y="{y + 4}" font-size="12">{escape(name)}</text>')
        x += 30 + 8 * len(name) + 24
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="sweep.csv written by scripts/bench-http.sh --connections-sweep")
    parser.add_argument("svg", help="where to write the plot")
    parser.add_argument("--title", default="walletd vs bare hyper by connection count")
    args = parser.parse_args()
    series, failed = load(args.csv)
    with open(args.svg, "w") as f:
        f.write(render(series, failed, args.title))
    print(f"plot-sweep: {len(series)} series, {sum(len(p) for p in series.values())} points -> {args.svg}")


if __name__ == "__main__":
    main()
