#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots a streaming benchmark's or a ddo-run --compare sweep's results.

    tools/plot_bench.py bench.json [-o plot.png|plot.svg]
    tools/plot_bench.py ddo-run-compare.json [-o compare.png]

A streaming benchmark's JSON (`streaming_bench --json FILE`): its ratio to the bound per variant,
one group of bars per token count. Uses matplotlib when it is installed (PNG or SVG, by the
output's extension); without it, writes an SVG by hand (a .png output name is then changed to
.svg, and the file written is named on stdout).

A `ddo-run --compare` JSON ("kind": "ddo-run compare"): ms per step against the emulated VRAM,
ddo's plan on each card with its bound max(C, W/B) beside it, and the resident and naive rows as
horizontal lines. Always a PNG (the default output: the JSON's name with .png): matplotlib when
installed, else tools/png_canvas.py, which needs only the standard library (the GPU machine has
no matplotlib).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import png_canvas  # noqa: E402  (beside this script)

COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c", "#ccb974", "#64b5cd"]


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = data.get("runs", [])
    variants = []
    for run in runs:
        for v in run["variants"]:
            if v["name"] != "resident" and v["name"] not in variants:
                variants.append(v["name"])
    table = {}  # (tokens, variant) -> ratio
    for run in runs:
        for v in run["variants"]:
            table[(run["tokens"], v["name"])] = v["ratio"]
    title = "streaming_bench on {} ({:.2f} GB of weights, B = {:.1f} GB/s)".format(
        data.get("device", "?"), data.get("model", {}).get("weight_bytes", 0) / 1e9,
        data.get("bandwidth_gbps", {}).get("pinned_h2d", 0))
    return title, [r["tokens"] for r in runs], variants, table


def plot_matplotlib(out, title, tokens, variants, table):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / max(1, len(variants))
    for i, name in enumerate(variants):
        xs, ys = [], []
        for j, t in enumerate(tokens):
            if (t, name) in table:
                xs.append(j + (i - (len(variants) - 1) / 2) * width)
                ys.append(table[(t, name)])
        bars = ax.bar(xs, ys, width, label=name, color=COLOURS[i % len(COLOURS)])
        top = ymax(table)
        for bar, y in zip(bars, ys):
            # A bar past the axis is clipped: its label sits inside the bar's top, with an arrow.
            clipped = y > top
            ax.annotate(f"{y:.2f}" + (" ^" if clipped else ""),
                        (bar.get_x() + bar.get_width() / 2, top * 0.97 if clipped else y),
                        ha="center", va="top" if clipped else "bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.05, color="red", linewidth=0.8, linestyle="--", label="target 1.05x (1.10x staged)")
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels([f"{t} tokens" for t in tokens])
    ax.set_ylabel("step time / max(C, W/B)")
    ax.set_ylim(0, ymax(table))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def ymax(table):
    # Naive variants are many times the bound: clip the axis so the interesting ones stay legible.
    return min(3.0, max([1.2] + [r * 1.1 for r in table.values()]))


def plot_svg(out, title, tokens, variants, table):
    w, h, left, right, top, bottom = 960, 460, 60, 260, 40, 50
    pw, ph = w - left - right, h - top - bottom
    top_value = ymax(table)
    y = lambda v: top + ph - min(v, top_value) / top_value * ph
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13">{escape(title)}</text>']
    for k in range(int(top_value / 0.5) + 1):
        v = k * 0.5
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#ddd"/><text x="{left - 6}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{v:.1f}</text>')
    group = pw / max(1, len(tokens))
    bar = group * 0.8 / max(1, len(variants))
    for j, t in enumerate(tokens):
        x0 = left + j * group + group * 0.1
        parts.append(f'<text x="{left + (j + 0.5) * group:.1f}" y="{top + ph + 20}" '
                     f'text-anchor="middle">{t} tokens</text>')
        for i, name in enumerate(variants):
            if (t, name) not in table:
                continue
            r = table[(t, name)]
            x = x0 + i * bar
            parts.append(f'<rect x="{x:.1f}" y="{y(r):.1f}" width="{bar * 0.9:.1f}" '
                         f'height="{top + ph - y(r):.1f}" fill="{COLOURS[i % len(COLOURS)]}"/>')
            clipped = r > top_value
            parts.append(f'<text x="{x + bar * 0.45:.1f}" y="{y(r) + (12 if clipped else -3):.1f}" '
                         f'text-anchor="middle" font-size="9">{r:.2f}{" ^" if clipped else ""}</text>')
    for v, colour, dash in ((1.0, "black", ""), (1.05, "red", ' stroke-dasharray="5,3"')):
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="{colour}"{dash}/>')
    parts.append(f'<text x="18" y="{top + ph / 2}" transform="rotate(-90 18 {top + ph / 2})" '
                 f'text-anchor="middle">step time / max(C, W/B)</text>')
    lx = left + pw + 15
    for i, name in enumerate(variants + ["target 1.05x (1.10x staged)"]):
        ly = top + 10 + i * 18
        colour = COLOURS[i % len(COLOURS)] if i < len(variants) else "red"
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{colour}"/>'
                     f'<text x="{lx + 18}" y="{ly}">{escape(name)}</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def load_compare(data):
    """The sweep's series: ddo points (vram, ms, bound), horizontal baselines (name, ms)."""
    ddo, baselines = [], []
    for row in data.get("rows", []):
        if "skipped" in row:
            continue
        if row["variant"] == "ddo" and row.get("vram_gib", 0) > 0:
            ddo.append((row["vram_gib"], row["ms"], row["bound_ms"]))
        elif row["variant"] != "ddo":
            baselines.append((row["variant"], row["ms"]))
    ddo.sort()
    # Two lines: one long line ran past the figure's left edge with matplotlib's centred title.
    title = "ddo-run --compare on {}:\n{} ({:.1f} GB), {} tokens, B = {:.1f} GB/s".format(
        data.get("device", "?"), data.get("model", "?"), data.get("model_bytes", 0) / 1e9,
        data.get("tokens", "?"), data.get("pinned_gbps", 0))
    return title, ddo, baselines


def compare_axes(ddo, baselines):
    """x range (GiB) and y top (ms): baselines far above ddo are clipped and labelled."""
    xs = [v for v, _, _ in ddo] or [1.0]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 * 0.5, x1 * 1.5
    near = [ms for _, ms, _ in ddo] + [b for _, _, b in ddo] + [ms for n, ms in baselines if n == "resident"]
    top = max(near + [1e-9]) * 1.6
    return x0, x1, top


def plot_compare_matplotlib(out, title, ddo, baselines):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x0, x1, top = compare_axes(ddo, baselines)
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.plot([v for v, _, _ in ddo], [m for _, m, _ in ddo], "o-", color=COLOURS[0], label="ddo")
    ax.plot([v for v, _, _ in ddo], [b for _, _, b in ddo], "--", color="black",
            label="bound max(C, W/B)")
    for i, (name, ms) in enumerate(baselines):
        clipped = ms > top
        ax.axhline(min(ms, top * 0.98), color=COLOURS[(i + 1) % len(COLOURS)], linewidth=1,
                   linestyle=":" if clipped else "-",
                   label=f"{name}: {ms:.1f} ms" + (" (off the chart)" if clipped else ""))
    ax.set_xlim(x0 - (x1 - x0) * 0.05, x1 + (x1 - x0) * 0.05)
    ax.set_ylim(0, top)
    ax.set_xlabel("emulated VRAM (GiB)")
    ax.set_ylabel("ms per step")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_compare_png(out, title, ddo, baselines):
    w, h, left, right, top_px, bottom = 1000, 480, 70, 300, 50, 50
    pw, ph = w - left - right, h - top_px - bottom
    x0, x1, top = compare_axes(ddo, baselines)
    span = x1 - x0
    x0, x1 = x0 - span * 0.05, x1 + span * 0.05
    X = lambda v: left + (v - x0) / (x1 - x0) * pw
    Y = lambda ms: top_px + ph - min(ms, top) / top * ph
    c = png_canvas.Canvas(w, h)
    black, grey = (0, 0, 0), (221, 221, 221)
    c.text(w / 2, 12, title.replace("\n", " ")[:160], black, 1, "middle")
    for k in range(6):
        ms = top * k / 5
        c.line(left, Y(ms), left + pw, Y(ms), grey)
        c.text(left - 6, Y(ms) - 3, f"{ms:.0f}", black, 1, "right")
    for v, _, _ in ddo:
        c.line(X(v), top_px + ph, X(v), top_px + ph + 4, black)
        c.text(X(v), top_px + ph + 8, f"{v:g}", black, 1, "middle")
    c.line(left, top_px + ph, left + pw, top_px + ph, black)
    c.line(left, top_px, left, top_px + ph, black)
    c.text(left + pw / 2, h - 18, "emulated VRAM (GiB)", black, 1, "middle")
    c.text(8, top_px - 14, "ms per step", black)
    legend = []
    colour = png_canvas.hex_colour(COLOURS[0])
    for (va, ma, ba), (vb, mb, bb) in zip(ddo, ddo[1:]):
        c.line(X(va), Y(ma), X(vb), Y(mb), colour, width=3)
        c.line(X(va), Y(ba), X(vb), Y(bb), black, width=1, dash=6)
    for v, ms, b in ddo:
        c.rect(X(v) - 3, Y(ms) - 3, X(v) + 3, Y(ms) + 3, colour)
        c.text(X(v) + 6, Y(ms) - 10, f"{ms:.1f}", colour)
        if len(ddo) == 1:
            c.line(X(v) - 20, Y(b), X(v) + 20, Y(b), black, dash=6)
    legend.append(("ddo", colour, 0))
    legend.append(("bound max(C, W/B)", black, 6))
    for i, (name, ms) in enumerate(baselines):
        col = png_canvas.hex_colour(COLOURS[(i + 1) % len(COLOURS)])
        clipped = ms > top
        c.line(left, Y(ms), left + pw, Y(ms), col, width=2, dash=3 if clipped else 0)
        legend.append((f"{name}: {ms:.1f} ms" + (" (off chart)" if clipped else ""), col,
                       3 if clipped else 0))
    lx = left + pw + 20
    for i, (name, col, dash) in enumerate(legend):
        ly = top_px + 10 + i * 18
        c.line(lx, ly + 3, lx + 20, ly + 3, col, width=3 if dash == 0 else 1, dash=dash)
        c.text(lx + 26, ly, name[:42], black)
    c.save(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("--svg", action="store_true", help="write SVG by hand even with matplotlib")
    parser.add_argument("--no-matplotlib", action="store_true",
                        help="compare plots: draw with tools/png_canvas.py even with matplotlib")
    args = parser.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    if data.get("kind") == "ddo-run compare":
        out = args.output or os.path.splitext(args.json)[0] + ".png"
        if not out.endswith(".png"):
            sys.exit(f"plot_bench: a compare plot is a PNG; got -o {out}")
        title, ddo, baselines = load_compare(data)
        if not ddo:
            sys.exit(f"plot_bench: {args.json} has no ddo row on an emulated card to plot")
        try:
            if args.no_matplotlib:
                raise ImportError
            import matplotlib  # noqa: F401
            plot_compare_matplotlib(out, title, ddo, baselines)
        except ImportError:
            plot_compare_png(out, title, ddo, baselines)
        print(out)
        return
    out = args.output or os.path.splitext(args.json)[0] + ".svg"
    title, tokens, variants, table = load(args.json)
    if not tokens:
        sys.exit(f"plot_bench: {args.json} has no runs")
    use_mpl = not args.svg
    if use_mpl:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            use_mpl = False
    if use_mpl:
        plot_matplotlib(out, title, tokens, variants, table)
    else:
        if not out.endswith(".svg"):
            out = os.path.splitext(out)[0] + ".svg"
        plot_svg(out, title, tokens, variants, table)
    print(out)


if __name__ == "__main__":
    main()
