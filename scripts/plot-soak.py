#!/usr/bin/env python3
"""Plots a soak of scripts/soak.sh as one SVG: walletd's RSS (MiB) and requests/s over time, one
panel each, sharing the time axis.

    scripts/plot-soak.py target/soak/DATE/soak.csv docs/bench/soak.svg --title "..."

Reads the CSV soak.sh writes (columns t_s, rss_kib, rps, data_kib). Standard library only: no
plotting package to install, and the SVG is plain text that diffs and renders anywhere.
"""

import argparse
import csv
import sys
from xml.sax.saxutils import escape

WIDTH, PANEL_HEIGHT, LEFT, RIGHT, TOP, GAP, BOTTOM = 900, 220, 80, 20, 40, 50, 45


def nice_max(value):
    """The smallest 1/2/5 x 10^k at or above value (at least 1)."""
    if value <= 0:
        return 1
    step = 1
    while step * 10 <= value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= value:
            return step * factor
    return step * 10


def panel(out, top, series_t, series_v, t_max, v_max, label, colour):
    height = PANEL_HEIGHT
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda t: LEFT + plot_w * t / t_max
    y = lambda v: top + height - height * v / v_max
    out.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{height}" '
               'fill="none" stroke="#999"/>')
    for i in range(6):
        value = v_max * i / 5
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" '
                   f'y2="{y(value):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" '
                   f'font-size="11">{value:,.0f}</text>')
    out.append(f'<text x="16" y="{top + height / 2:.0f}" font-size="12" '
               f'transform="rotate(-90 16 {top + height / 2:.0f})" text-anchor="middle">'
               f'{escape(label)}</text>')
    points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(series_t, series_v))
    out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("svg")
    parser.add_argument("--title", default="walletd soak")
    args = parser.parse_args()
    rows = list(csv.DictReader(open(args.csv)))
    if not rows:
        print(f"plot-soak: {args.csv} has no samples", file=sys.stderr)
        return 1
    t = [int(r["t_s"]) for r in rows]
    rss = [int(r["rss_kib"]) / 1024 for r in rows]
    rps = [int(r["rps"]) for r in rows]
    t_max = nice_max(max(t))
    height = TOP + 2 * PANEL_HEIGHT + GAP + BOTTOM
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           'font-family="sans-serif">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="14">'
           f'{escape(args.title)}</text>']
    panel(out, TOP, t, rss, t_max, nice_max(max(rss) * 1.1), "RSS (MiB)", "#d62728")
    second = TOP + PANEL_HEIGHT + GAP
    panel(out, second, t, rps, t_max, nice_max(max(rps) * 1.1), "requests/s", "#1f77b4")
    plot_w = WIDTH - LEFT - RIGHT
    base = second + PANEL_HEIGHT
    for i in range(11):
        seconds = t_max * i / 10
        px = LEFT + plot_w * i / 10
        out.append(f'<text x="{px:.1f}" y="{base + 16}" text-anchor="middle" '
                   f'font-size="11">{seconds:.0f}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{base + 36}" text-anchor="middle" '
               'font-size="12">seconds since the load started</text>')
    out.append("</svg>")
    with open(args.svg, "w") as handle:
        handle.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
