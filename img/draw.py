"""Draw the course's diagrams into img/, and keep the copies that notebooks embed equal to them.

    python img/draw.py            # redraw every diagram; refresh every copy embedded in a notebook
    python img/draw.py --check    # exit 1 if a committed diagram or an embedded copy is out of date
    python img/draw.py --markdown attention_pooling   # the markdown cell that embeds a diagram

Why PNG embedded as a data URI. A notebook must show its diagrams offline in JupyterLab, on
GitHub's renderer and on Colab. A relative path (``../img/x.png``) does not resolve on Colab;
Colab renders neither markdown cell attachments nor SVG data URIs (googlecolab/colabtools issues
3836 and 2092), and JupyterLab does not render SVG attachments (jupyterlab/jupyterlab issue 10464).
What all three render is the form Colab's own "insert image" writes: a PNG as a data URI in the
markdown, ``![description](data:image/png;base64,...)``. So each diagram is a PNG in img/ (drawn
large, shown scaled to the notebook's width, so it stays sharp on high-resolution screens), and a
notebook embeds it in a markdown cell of its own whose image title names the file, e.g.
``![Attention pooling ...](data:image/png;base64,... "img/attention_pooling.png")``.
``tests/test_diagrams.py`` checks that every diagram is embedded, that every embedded copy equals
its file, and that the files are what this script draws.

Every diagram is drawn here with matplotlib, in inches (one axes covering the whole figure), from
the shapes and numbers the notebooks use; nothing is copied from elsewhere.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import patheffects  # noqa: E402
from matplotlib.patches import Circle, FancyBboxPatch, Rectangle  # noqa: E402

IMG_DIR = pathlib.Path(__file__).resolve().parent
ROOT = IMG_DIR.parent
NOTEBOOK_DIR = ROOT / "notebooks"
DPI = 160  # a 9-inch diagram is 1440 pixels wide, shown scaled down to the notebook's width

# One palette for every diagram: queries orange, keys blue, values green, weights red.
QUERY, QUERY_EDGE = "#fde2c8", "#d9822b"
KEY, KEY_EDGE = "#d6e6fa", "#3a78c2"
VALUE, VALUE_EDGE = "#d8efd3", "#3c9a4a"
WEIGHT = "#c0392b"
MASKED = "#e4e4e4"
NEUTRAL, NEUTRAL_EDGE = "#f3f3f3", "#555555"
NORM = "#fff1b3"
ATTENTION = "#f9d5d3"
FFN = "#d9f2f0"
INK = "#222222"
MUTED = "#9a9a9a"
HEAD_COLOURS = ["#f2b880", "#8fb8e8", "#9fd59a", "#d7a6e0"]

plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 11, "mathtext.fontset": "dejavusans"})


# ---------------------------------------------------------------------------------------------
# Drawing helpers (coordinates in inches, origin bottom left)


def canvas(width: float, height: float):
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, text="", face=NEUTRAL, edge=NEUTRAL_EDGE, size=11, rounded=True,
        lw=1.2, color=INK, **text_kw):
    """A box with its lower left corner at (x, y) and ``text`` in its centre."""
    style = "round,pad=0,rounding_size=0.08" if rounded else "square,pad=0"
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=face, edgecolor=edge,
                                linewidth=lw))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=color,
                **text_kw)
    return (x, y, w, h)


def arrow(ax, start, end, color="#444444", lw=1.3, style="-|>", rad=0.0, shrink=2.0, ls="-",
          halo=False):
    """An arrow from start to end; with ``halo``, a white border lets it cross other lines."""
    annotation = ax.annotate("", xy=end, xytext=start,
                             arrowprops=dict(arrowstyle=style, color=color, lw=lw, shrinkA=shrink,
                                             shrinkB=shrink, linestyle=ls,
                                             connectionstyle=f"arc3,rad={rad}", mutation_scale=12))
    if halo:
        annotation.arrow_patch.set_path_effects(
            [patheffects.Stroke(linewidth=lw + 4, foreground="white"), patheffects.Normal()])


def label(ax, x, y, text, size=11, ha="center", va="center", color=INK, **kw):
    ax.text(x, y, text, ha=ha, va=va, fontsize=size, color=color, **kw)


def cell_grid(ax, x, y, values, cell=0.42, mask=None, face_of=None, size=9, fmt="{:.2f}"):
    """A matrix of cells, row 0 on top, lower left corner at (x, y); masked cells grey with 0."""
    rows, cols = values.shape
    for i in range(rows):
        for j in range(cols):
            cx, cy = x + j * cell, y + (rows - 1 - i) * cell
            masked = mask is not None and not mask[i, j]
            face = MASKED if masked else (face_of(values[i, j]) if face_of else "white")
            ax.add_patch(Rectangle((cx, cy), cell, cell, facecolor=face, edgecolor="white" if
                                   not masked else "#bdbdbd", linewidth=1.0,
                                   hatch="////" if masked else None))
            text = "0" if masked else fmt.format(values[i, j])
            dark = not masked and face_of is not None and values[i, j] > 0.6
            ax.text(cx + cell / 2, cy + cell / 2, text, ha="center", va="center", fontsize=size,
                    color=MUTED if masked else "white" if dark else INK)
    ax.add_patch(Rectangle((x, y), cols * cell, rows * cell, fill=False, edgecolor="#666666",
                           linewidth=1.0))


def weight_colour(w: float) -> tuple:
    """Light to dark red for weights 0 .. 1 (the colour map of the heatmaps, Reds)."""
    return plt.get_cmap("Reds")(0.12 + 0.75 * float(w))


def softmax(scores):
    e = np.exp(np.asarray(scores, dtype=float) - np.max(scores))
    return e / e.sum()


# ---------------------------------------------------------------------------------------------
# The diagrams


def attention_cues():
    """Nonvolitional cue (the salient red cup) and volitional cue (the book I want to read) (01)."""
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 2.6))
    objects = ["news-\npaper", "research\npaper", "note-\nbook", "book", "coffee\ncup"]
    for ax, target, title in [(axes[0], "coffee\ncup", "nonvolitional cue: the salient red cup"),
                              (axes[1], "book", "volitional cue: I want to read, so the book")]:
        for i, name in enumerate(objects):
            red = name.startswith("coffee")
            ax.add_patch(Rectangle((i * 1.2, 0), 1, 1.4, color=WEIGHT if red else "#bfbfbf"))
            ax.text(i * 1.2 + 0.5, 0.7, name, ha="center", va="center", fontsize=9,
                    color="white" if red else INK)
        ax.add_patch(Circle((2.9, 3.1), 0.17, color=INK))  # the eye
        ax.text(3.2, 3.1, "you", va="center", fontsize=9, color=INK)
        x = objects.index(target) * 1.2 + 0.5
        ax.annotate("", xy=(x, 1.5), xytext=(2.9, 2.9),
                    arrowprops=dict(arrowstyle="-|>", lw=2, color=INK, mutation_scale=14))
        ax.set_title(title, fontsize=11)
        ax.set_xlim(-0.2, 6.0)
        ax.set_ylim(-0.2, 3.5)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    return fig


def attention_pooling():
    """Query and keys -> scoring function -> softmax -> weighted sum of the values (01, 03)."""
    fig, ax = canvas(9.0, 3.9)
    scores = np.array([2.0, 0.5, -1.0, 1.0])
    weights = softmax(scores)
    rows = [2.75, 2.05, 1.35, 0.65]  # centres of the m = 4 key-value rows
    box(ax, 0.15, 3.25, 0.9, 0.45, r"query $\mathbf{q}$", QUERY, QUERY_EDGE)
    label(ax, 1.6, 3.55, "the scoring function a compares the query with every key",
          size=9.5, ha="left", color="#555555")
    # the query reaches every scoring box along one line, which the keys' arrows cross
    ax.plot([1.05, 1.3, 1.3], [3.47, 3.47, rows[-1] + 0.1], color=QUERY_EDGE, lw=1.2)
    for i, yc in enumerate(rows):
        k = i + 1
        box(ax, 0.15, yc - 0.2, 0.9, 0.4, rf"key $\mathbf{{k}}_{k}$", KEY, KEY_EDGE)
        box(ax, 1.55, yc - 0.22, 1.35, 0.44, rf"$a(\mathbf{{q}}, \mathbf{{k}}_{k})$")
        arrow(ax, (1.3, yc + 0.1), (1.55, yc + 0.1), color=QUERY_EDGE, lw=1.2, shrink=0)
        arrow(ax, (1.05, yc - 0.08), (1.55, yc - 0.08), shrink=0, halo=True)
        box(ax, 3.25, yc - 0.2, 0.75, 0.4, f"{scores[i]:+.1f}", "white", "#888888", size=10)
        arrow(ax, (2.9, yc), (3.25, yc))
        arrow(ax, (4.0, yc), (4.45, yc))
        # the weight as a bar, its value beside it
        ax.add_patch(Rectangle((5.35, yc - 0.15), 0.9 * weights[i], 0.3, facecolor=WEIGHT,
                               edgecolor="none"))
        label(ax, 5.35 + 0.9 * weights[i] + 0.06, yc, rf"$\alpha_{k}$ = {weights[i]:.2f}",
              size=9.5, ha="left")
        box(ax, 7.05, yc - 0.2, 0.8, 0.4, rf"value $\mathbf{{v}}_{k}$", VALUE, VALUE_EDGE,
            size=9.5)
        arrow(ax, (7.85, yc), (8.36, 1.85), color=VALUE_EDGE, lw=1.0)
    label(ax, 3.62, 3.2, "scores", size=10)
    box(ax, 4.45, 0.45, 0.75, 2.5, "softmax", NORM, "#b8a03a", size=10.5, rotation=90)
    label(ax, 5.8, 3.2, "attention weights", size=10)
    label(ax, 5.8, 0.18, r"$\geq 0$, sum to 1", size=9.5, color="#555555")
    label(ax, 7.45, 3.2, "values", size=10)
    ax.add_patch(Circle((8.5, 1.85), 0.17, facecolor="white", edgecolor=INK, linewidth=1.2))
    label(ax, 8.5, 1.85, r"$\Sigma$", size=12)
    box(ax, 8.08, 0.42, 0.84, 0.5, r"$\sum_i \alpha_i \mathbf{v}_i$", VALUE, VALUE_EDGE,
        size=10.5)
    label(ax, 8.5, 0.2, "output", size=9.5)
    arrow(ax, (8.5, 1.68), (8.5, 0.92))
    # the weights scale the values: a dotted link from each bar to its value
    for yc in rows:
        arrow(ax, (6.75, yc), (7.05, yc), color=WEIGHT, lw=1.0, style="-", ls=":")
    return fig


def masked_softmax():
    """Valid lengths keep the first keys of each row; the causal mask as valid lengths (03, 06)."""
    fig, ax = canvas(9.0, 3.6)
    rng = np.random.default_rng(3)
    cell = 0.4

    def weights_for(lengths, num_keys):
        scores = rng.normal(size=(len(lengths), num_keys))
        out = np.zeros_like(scores)
        for i, n in enumerate(lengths):
            if n:
                out[i, :n] = softmax(scores[i, :n])
        return out

    label(ax, 1.85, 3.35, "padding: valid_lens = [2, 3]", size=11, weight="bold")
    for b, (n, x0) in enumerate([(2, 0.35), (3, 0.35)]):
        y0 = 1.95 - b * 1.25
        lengths = [n, n]
        grid = weights_for(lengths, 4)
        mask = np.arange(4)[None, :] < np.array(lengths)[:, None]
        cell_grid(ax, x0 + 0.75, y0, grid, cell=cell, mask=mask, face_of=weight_colour)
        label(ax, x0 + 0.67, y0 + cell, f"sequence {b}", size=9.5, ha="right")
        for i in range(2):
            label(ax, x0 + 0.75 + 4 * cell + 0.1, y0 + (1.5 - i) * cell, "sum 1", size=8.5,
                  ha="left", color="#555555")
    label(ax, 1.95, 0.25, "keys 0-3 of each query; grey: padding, weight exactly 0", size=9,
          color="#555555")

    x1 = 4.05
    label(ax, x1 + 1.0, 3.35, "valid length 0", size=11, weight="bold")
    grid = weights_for([4, 0], 4)
    mask = np.arange(4)[None, :] < np.array([4, 0])[:, None]
    cell_grid(ax, x1 + 0.2, 1.95, grid, cell=cell, mask=mask, face_of=weight_colour)
    label(ax, x1 + 0.2 + 2 * cell, 1.65, "lengths [4, 0]", size=9)
    label(ax, x1 + 1.0, 1.1, "a row with no valid key:\nall zeros (never NaN),\noutput 0",
          size=9, color="#555555")

    x2 = 6.1
    label(ax, x2 + 1.2, 3.35, "causal: query i sees keys 0..i", size=11, weight="bold")
    T = 5
    lengths = np.arange(1, T + 1)
    grid = weights_for(lengths, T)
    mask = np.arange(T)[None, :] < lengths[:, None]
    cell_grid(ax, x2 + 0.25, 0.75, grid, cell=cell, mask=mask, face_of=weight_colour, size=8)
    for i in range(T):
        label(ax, x2 + 0.25 + T * cell + 0.1, 0.75 + (T - 0.5 - i) * cell, f"len {i + 1}",
              size=8.5, ha="left", color="#555555")
    label(ax, x2 + 0.25 + T * cell / 2, 0.45, "keys", size=9)
    label(ax, x2 + 0.05, 0.75 + T * cell / 2, "queries", size=9, rotation=90)
    label(ax, x2 + 1.2, 0.15, "valid_lens (B, T_q) = 1, 2, ..., T", size=9, color="#555555")
    return fig


def scaled_dot_product_and_multihead():
    """softmax(QK^T / sqrt(d_k)) V step by step, and h heads around it (03, 04)."""
    fig, ax = canvas(9.0, 5.2)
    # Left: scaled dot-product attention, top to bottom, shapes beside the arrows.
    label(ax, 2.1, 4.95, "scaled dot-product attention", size=11.5, weight="bold")
    x, w, xc = 0.25, 1.9, 1.2  # the column of steps: left edge, width, centre
    box(ax, 0.25, 4.2, 0.7, 0.42, "Q", QUERY, QUERY_EDGE)
    box(ax, 1.45, 4.2, 0.7, 0.42, "K", KEY, KEY_EDGE)
    box(ax, 3.4, 4.2, 0.7, 0.42, "V", VALUE, VALUE_EDGE)
    steps = [(3.45, r"$QK^\top$  (batched matmul)", NEUTRAL),
             (2.7, r"$\div \sqrt{d_k}$", NEUTRAL),
             (1.95, "mask (valid_lens)", MASKED),
             (1.2, "softmax over the keys", NORM)]
    for y, text, face in steps:
        box(ax, x, y, w, 0.45, text, face, size=10)
    arrow(ax, (0.6, 4.2), (0.85, 3.9))
    arrow(ax, (1.8, 4.2), (1.55, 3.9))
    for (y0, _, _), (y1, _, _) in zip(steps, steps[1:]):
        arrow(ax, (xc, y0), (xc, y1 + 0.45))
    label(ax, 2.25, 3.67, "scores\n(B, T_q, T_k)", size=8.5, ha="left", color="#555555")
    label(ax, 2.25, 1.42, "weights\n(B, T_q, T_k)", size=8.5, ha="left", color=WEIGHT)
    box(ax, 2.95, 0.45, 1.3, 0.45, "matmul", NEUTRAL, size=10)
    arrow(ax, (xc, 1.2), (3.1, 0.9), rad=0.15)
    arrow(ax, (3.75, 4.2), (3.75, 0.9))
    label(ax, 3.85, 2.6, "(B, T_k, d_v)", size=8.5, ha="left", color="#555555")
    label(ax, 3.6, 0.15, "output (B, T_q, d_v)", size=9.5)

    # Right: multi-head attention.
    x0 = 4.75
    label(ax, x0 + 2.1, 4.95, "multi-head attention (h heads)", size=11.5, weight="bold")
    inputs = [("queries", QUERY, QUERY_EDGE, r"$W_q$"), ("keys", KEY, KEY_EDGE, r"$W_k$"),
              ("values", VALUE, VALUE_EDGE, r"$W_v$")]
    for i, (name, face, edge, weight) in enumerate(inputs):
        x = x0 + 0.1 + i * 1.4
        box(ax, x, 4.25, 1.1, 0.4, name, face, edge, size=10)
        for layer in range(3, 0, -1):  # one linear projection per head, drawn as a stack
            box(ax, x + 0.06 * layer, 3.35 + 0.06 * layer, 1.05, 0.4, "", face, edge, size=9)
        box(ax, x, 3.35, 1.05, 0.4, f"linear {weight}", face, edge, size=9.5)
        arrow(ax, (x + 0.55, 4.25), (x + 0.55, 3.93))
        arrow(ax, (x + 0.52, 3.35), (x0 + 0.3 + i * 1.3, 2.65))
    for layer in range(3, 0, -1):
        box(ax, x0 + 0.05 + 0.07 * layer, 1.95 + 0.07 * layer, 3.8, 0.65, "", ATTENTION, "#b55a55")
    box(ax, x0 + 0.05, 1.95, 3.8, 0.65, "h scaled dot-product attentions in parallel,\n"
        "one per head, each of width d_k = d_model / h", ATTENTION, "#b55a55", size=9.5)
    box(ax, x0 + 1.0, 1.15, 1.9, 0.42, "concatenate heads", NEUTRAL, size=10)
    box(ax, x0 + 1.0, 0.45, 1.9, 0.42, r"linear $W_o$", NEUTRAL, size=10)
    arrow(ax, (x0 + 1.95, 1.95), (x0 + 1.95, 1.57))
    arrow(ax, (x0 + 1.95, 1.15), (x0 + 1.95, 0.87))
    label(ax, x0 + 3.0, 1.36, r"(B, T_q, h$\cdot$d_v)", size=8.5, ha="left", color="#555555")
    label(ax, x0 + 1.95, 0.15, "output (B, T_q, d_model)", size=9.5)
    return fig


def split_merge_heads():
    """(B, T, h*d_k) -> (B, T, h, d_k) -> (B, h, T, d_k) -> (B*h, T, d_k), and back (04). Each cell
    shows its token's index, so that the panels show what each step groups: the reshape cuts every
    token's features into heads (token by token), the transpose regroups them head by head."""
    fig, ax = canvas(9.0, 4.9)
    B, T, h, d_k = 2, 3, 2, 3
    cell = 0.2
    shades = [0.0, 0.5]  # sequence 0 darker, sequence 1 lighter

    def colour(head, b):
        base = np.array(matplotlib.colors.to_rgb(HEAD_COLOURS[head]))
        return tuple(base + (1 - base) * shades[b])

    def row(x, y, t, heads, b, head_gap=0.0):
        """One token's features: d_k cells per head, coloured by head, labelled with t."""
        for c, head in enumerate(heads):
            left = x + c * cell + (head_gap if c >= d_k and head_gap else 0.0)
            ax.add_patch(Rectangle((left, y), cell, cell, facecolor=colour(head, b),
                                   edgecolor="white", linewidth=0.8))
            ax.text(left + cell / 2, y + cell / 2, str(t), ha="center", va="center", fontsize=6.5,
                    color="#555555")

    heads_of_features = [f // d_k for f in range(h * d_k)]
    columns = [0.5, 2.55, 4.6, 6.7]
    titles = ["(B, T, h·d_k)", "reshape\n(B, T, h, d_k)", "transpose(1, 2)\n(B, h, T, d_k)",
              "reshape\n(B·h, T, d_k)"]
    notes = ["T tokens × h·d_k features", "token by token: h groups each", "head by head: T tokens each",
             "index b·h + i"]
    for x, title, note in zip(columns, titles, notes):
        label(ax, x + 0.65, 4.75, title, size=9.5, weight="bold", va="top")
        label(ax, x + 0.65, 4.15, note, size=8.5, color="#555555")
    for b in range(B):
        top = 3.85 - b * 1.5  # top edge of sequence b's drawings
        label(ax, 0.28, top - 0.65, f"sequence {b}", size=8.5, rotation=90)
        for t in range(T):  # (B, T, h*d_k): one block, a row per token
            row(columns[0], top - (t + 1) * cell, t, heads_of_features, b)
        for t in range(T):  # (B, T, h, d_k): per token, h groups (rows apart: tokens outermost)
            row(columns[1], top - (t + 1) * cell - t * 0.12, t, heads_of_features, b, head_gap=0.1)
        for head in range(h):  # (B, h, T, d_k): per head, its T tokens (heads outermost)
            for t in range(T):
                row(columns[2] + 0.05, top - (head * T + t + 1) * cell - head * 0.1, t,
                    [head] * d_k, b)
            label(ax, columns[2] + 0.1 + d_k * cell, top - (head * T + 1.5) * cell - head * 0.1,
                  f"head {head}", size=8.5, ha="left")
    # the folded batch: index b*h + i holds sequence b, head i
    for index in range(B * h):
        b, head = divmod(index, h)
        top = 3.85 - index * (T * cell + 0.12)
        for t in range(T):
            row(columns[3] + 0.2, top - (t + 1) * cell, t, [head] * d_k, b)
        label(ax, columns[3] + 0.3 + d_k * cell, top - T * cell / 2,
              f"{index}: sequence {b}, head {head}", size=8.5, ha="left")
    for x in columns[:3]:
        arrow(ax, (x + 1.45, 2.55), (x + 1.9, 2.55), lw=1.6)
    label(ax, 4.5, 0.55, "split_heads: left to right.  merge_heads: the same steps backwards, "
          "which concatenates the heads' features again.", size=9.5)
    label(ax, 4.5, 0.2, "Each cell shows its token. valid_lens follow the folded order: "
          "repeat_interleave(h) turns [3, 6] into [3, 3, 6, 6].", size=9.5, color="#555555")
    return fig


def cnn_rnn_self_attention():
    """What the outputs of each kind of layer see, and the path from the first input to the last
    output: five stacked convolutions, one recurrent layer, one self-attention layer."""
    fig, ax = canvas(9.0, 4.35)
    n = 6
    spacing = 0.42
    panels = [("convolution, kernel k = 3", "5 stacked layers; each node sees 3 below it"),
              ("recurrent layer", "h_t needs h_(t−1): one step after another"),
              ("self-attention", "every output sees every input")]
    facts = [("sequential steps O(1)", "path x1 → y6: (n−1)/⌊k/2⌋ = 5 layers", "cost O(k n d²)"),
             ("sequential steps O(n)", "path x1 → h6: n = 6 steps", "cost O(n d²)"),
             ("sequential steps O(1)", "path x1 → y6: 1 layer", "cost O(n² d)")]
    y_in, y_out = 1.45, 3.15
    for k, ((title, subtitle), (steps, path, cost)) in enumerate(zip(panels, facts)):
        x0 = 0.3 + 3.0 * k
        label(ax, x0 + 1.2, 4.1, title, size=11, weight="bold")
        label(ax, x0 + 1.2, 3.77, subtitle, size=8.5, color="#555555")
        xs = [x0 + 0.15 + i * spacing for i in range(n)]
        output_name = "h" if k == 1 else "y"
        # rows of nodes from the inputs up: the convolution has 4 hidden rows between them
        rows = list(np.linspace(y_in, y_out, n)) if k == 0 else [y_in, y_out]
        radius = [0.13] + [0.07] * (len(rows) - 2) + [0.13]
        for r, y in enumerate(rows):
            face, edge = ((KEY, KEY_EDGE) if r == 0 else (VALUE, VALUE_EDGE) if r == len(rows) - 1
                          else (NEUTRAL, NEUTRAL_EDGE))
            for x in xs:
                ax.add_patch(Circle((x, y), radius[r], facecolor=face, edgecolor=edge, lw=1.0))
        for i, x in enumerate(xs):
            label(ax, x, y_in - 0.27, f"x{i + 1}", size=8)
            label(ax, x, y_out + 0.27, f"{output_name}{i + 1}", size=8)
        for r in range(len(rows) - 1):
            for i in range(n):
                sources = ([j for j in (i - 1, i, i + 1) if 0 <= j < n] if k == 0
                           else [i] if k == 1 else range(n))
                for j in sources:
                    # in red: the path from x1 to the last output (the convolution: one more
                    # position per layer)
                    red = ((k == 0 and j == r and i == r + 1) or (k == 1 and i == 0 and j == 0)
                           or (k == 2 and j == 0 and i == n - 1))
                    ax.plot([xs[j], xs[i]], [rows[r] + radius[r], rows[r + 1] - radius[r + 1]],
                            color=WEIGHT if red else "#9a9a9a", lw=1.6 if red else 0.8,
                            zorder=1 if red else 0)
        if k == 1:  # the recurrence: h_t from h_(t-1)
            for i in range(n - 1):
                arrow(ax, (xs[i] + 0.13, y_out), (xs[i + 1] - 0.13, y_out), color=WEIGHT, lw=1.3,
                      shrink=0)
        for line, text in enumerate((steps, path, cost)):
            label(ax, x0 + 1.2, 0.85 - line * 0.28, text, size=9,
                  color=WEIGHT if line == 1 else INK)
    return fig


def transformer():
    """Encoder-decoder with its residual connections (post-norm), and post- vs pre-norm (06)."""
    fig, ax = canvas(9.0, 7.45)
    wb, hb = 1.9, 0.42

    def sublayer(x, y, name, face):
        """A sublayer and its Add & Norm above it, with the residual connection around both;
        returns the top of the Add & Norm."""
        box(ax, x, y, wb, hb, name, face, size=9.5)
        box(ax, x, y + 0.62, wb, 0.36, "Add & Norm", NORM, "#b8a03a", size=9.5)
        arrow(ax, (x + wb / 2, y + hb), (x + wb / 2, y + 0.62))
        # residual: from below the sublayer, around its left side, into the Add & Norm
        ax.plot([x + wb / 2, x - 0.22, x - 0.22], [y - 0.12, y - 0.12, y + 0.8], color=WEIGHT,
                lw=1.4)
        arrow(ax, (x - 0.22, y + 0.8), (x, y + 0.8), color=WEIGHT, lw=1.4, shrink=0)
        return y + 0.98

    def inputs(x, name):
        box(ax, x, 0.25, wb, 0.4, name, NEUTRAL, size=9.5)
        box(ax, x, 0.85, wb, 0.4, "+ positional encoding", NEUTRAL, size=9.5)
        arrow(ax, (x + wb / 2, 0.65), (x + wb / 2, 0.85))
        arrow(ax, (x + wb / 2, 1.25), (x + wb / 2, 1.75))

    def stack(x, top, text, text_x):
        ax.add_patch(FancyBboxPatch((x - 0.4, 1.45), wb + 0.6, top - 1.45, facecolor="none",
                                    boxstyle="round,pad=0.02", edgecolor="#777777",
                                    linestyle="--"))
        label(ax, text_x, (1.45 + top) / 2, text, size=11)

    def final_norm(x, y):
        """The LayerNorm that ends a pre-norm stack (a post-norm stack has none); returns its top."""
        arrow(ax, (x + wb / 2, y - 0.18), (x + wb / 2, y))
        ax.add_patch(FancyBboxPatch((x, y), wb, 0.34, boxstyle="round,pad=0,rounding_size=0.08",
                                    facecolor=NORM, edgecolor="#b8a03a", linewidth=1.2,
                                    linestyle="--"))
        label(ax, x + wb / 2, y + 0.17, "LayerNorm (pre-norm only)", size=8.5)
        return y + 0.34

    xe, xd = 0.8, 3.7
    label(ax, xe + wb / 2, 7.22, "encoder", size=11.5, weight="bold")
    inputs(xe, "source embedding")
    top = sublayer(xe, 1.75, "multi-head self-attention", ATTENTION)
    arrow(ax, (xe + wb / 2, top), (xe + wb / 2, top + 0.15))
    encoder_top = sublayer(xe, top + 0.15, "feed-forward", FFN)
    stack(xe, encoder_top + 0.12, "N ×", 0.2)
    encoder_top = final_norm(xe, encoder_top + 0.3)
    label(ax, xe + wb / 2, encoder_top + 0.6, "encoder output", size=9)

    label(ax, xd + wb / 2, 7.22, "decoder", size=11.5, weight="bold")
    inputs(xd, "target embedding")
    y = sublayer(xd, 1.75, "masked self-attention", ATTENTION)
    arrow(ax, (xd + wb / 2, y), (xd + wb / 2, y + 0.15))
    cross_y = y + 0.15
    y = sublayer(xd, cross_y, "encoder-decoder attention", ATTENTION)
    arrow(ax, (xd + wb / 2, y), (xd + wb / 2, y + 0.15))
    y = sublayer(xd, y + 0.15, "feed-forward", FFN)
    stack(xd, y + 0.12, "× N", xd + wb + 0.45)
    y = final_norm(xd, y + 0.3)
    box(ax, xd, y + 0.22, wb, 0.38, "linear", NEUTRAL, size=9.5)
    arrow(ax, (xd + wb / 2, y), (xd + wb / 2, y + 0.22))
    arrow(ax, (xd + wb / 2, y + 0.6), (xd + wb / 2, y + 0.8))
    label(ax, xd + wb / 2, y + 0.93, "logits: one score per word", size=9)
    label(ax, xd + wb / 2, y + 1.16, "(no softmax: the loss applies log-softmax)", size=8,
          color="#555555")
    # keys and values of every decoder layer's encoder-decoder attention: the encoder output
    route_x, route_y = xd - 0.55, encoder_top + 0.35
    ax.plot([xe + wb / 2, xe + wb / 2, route_x, route_x],
            [encoder_top, route_y, route_y, cross_y + hb / 2], color=KEY_EDGE, lw=1.4)
    arrow(ax, (route_x, cross_y + hb / 2), (xd, cross_y + hb / 2), color=KEY_EDGE, lw=1.4,
          shrink=0, halo=True)
    label(ax, route_x - 0.08, route_y - 0.15, "keys and values", size=8.5, color=KEY_EDGE,
          ha="right")
    label(ax, 3.1, 0.02, "red: the residual connections (post-norm, as in the paper)", size=9,
          color=WEIGHT, va="bottom")

    # post-norm vs pre-norm, one sublayer each
    xp = 6.45
    xc = xp + 1.1
    for k, (title, formula, note, pre) in enumerate(
            [("post-norm", "LayerNorm(x + Sublayer(x))", "every output is normalised", False),
             ("pre-norm", "x + Sublayer(LayerNorm(x))", "x reaches the output untouched",
              True)]):
        y0 = 3.75 - k * 3.45
        label(ax, xc, y0 + 3.0, title, size=11, weight="bold")
        label(ax, xc, y0 + 2.72, formula, size=9, color="#555555")
        label(ax, xc, y0 + 2.48, note, size=8.5, color=WEIGHT)
        label(ax, xc, y0 + 0.05, "x", size=10)
        names = ["LayerNorm", "sublayer", "+"] if pre else ["sublayer", "+", "LayerNorm"]
        y = y0 + 0.5
        centres = {}
        for name in names:
            if name == "+":
                ax.add_patch(Circle((xc, y + 0.15), 0.14, facecolor="white", edgecolor=INK))
                label(ax, xc, y + 0.15, "+", size=11)
                centres[name], height = y + 0.15, 0.3
            else:
                face, edge = (NORM, "#b8a03a") if name == "LayerNorm" else (ATTENTION,
                                                                            NEUTRAL_EDGE)
                box(ax, xp + 0.4, y, 1.4, 0.38, name, face, edge, size=9.5)
                height = 0.38
            arrow(ax, (xc, y - 0.22), (xc, y), shrink=0)
            y += height + 0.22
        arrow(ax, (xc, y - 0.22), (xc, y + 0.05), shrink=0)
        # the residual connection: x around the sublayer into the sum
        ax.plot([xc, xp + 2.05, xp + 2.05], [y0 + 0.3, y0 + 0.3, centres["+"]], color=WEIGHT,
                lw=1.4)
        arrow(ax, (xp + 2.05, centres["+"]), (xc + 0.14, centres["+"]), color=WEIGHT, shrink=0)
    return fig


def kv_cache():
    """Decoding step t: self-attention's cache grows by one position; cross-attention's is fixed.
    Positions and steps count from 0, as in the notebook's code."""
    fig, ax = canvas(9.0, 3.75)
    cell, gap = 0.36, 0.05
    steps, source_len = 4, 5
    label(ax, 2.3, 3.5, "masked self-attention's cache", size=11, weight="bold")
    label(ax, 2.3, 3.2, "keys and values of positions 0..t: one more per step", size=9,
          color="#555555")
    label(ax, 6.85, 3.5, "encoder-decoder attention's cache", size=11, weight="bold")
    label(ax, 6.85, 3.2, "the projected encoder output: filled once, before step 0", size=9,
          color="#555555")
    for t in range(steps):
        y = 3.0 - (t + 1) * 0.6
        label(ax, 0.35, y + cell / 2, f"t = {t}", size=10)
        for x_query, x_cells in ((0.75, 1.5), (4.85, 5.6)):
            box(ax, x_query, y, 0.5, cell, f"q{t}", QUERY, QUERY_EDGE, size=9)
            arrow(ax, (x_query + 0.5, y + cell / 2), (x_cells, y + cell / 2), color=QUERY_EDGE,
                  lw=1.1, shrink=0)
        for p in range(steps):
            x = 1.55 + p * (cell + gap)
            face, edge, text = ((KEY, KEY_EDGE, f"{p}") if p < t else
                                ("#7fb0ea", KEY_EDGE, f"{p}") if p == t else
                                ("white", "#cccccc", ""))
            ax.add_patch(Rectangle((x, y), cell, cell, facecolor=face, edgecolor=edge,
                                   linewidth=1.0, linestyle="-" if p <= t else ":"))
            label(ax, x + cell / 2, y + cell / 2, text, size=8.5)
        label(ax, 1.55 + steps * (cell + gap) + 0.05, y + cell / 2,
              f"k{t}, v{t} appended", size=8.5, ha="left", color="#555555")
        for s_ in range(source_len):
            x = 5.65 + s_ * (cell + gap)
            ax.add_patch(Rectangle((x, y), cell, cell, facecolor=VALUE, edgecolor=VALUE_EDGE,
                                   linewidth=1.0))
            label(ax, x + cell / 2, y + cell / 2, f"{s_}", size=8.5)
        label(ax, 5.65 + source_len * (cell + gap) + 0.05, y + cell / 2,
              "reused" if t > 0 else "filled", size=8.5, ha="left", color="#555555")
    label(ax, 4.5, 0.2, "at step t, the new token's query attends over both caches; nothing "
          "computed at an earlier step is computed again", size=9.5, color="#555555")
    return fig


def beam_search():
    """Beam search with k = 2 on notebook 10's made-up example: at every step the k best of the
    candidates survive, a finished hypothesis competing as it is (10)."""
    fig, ax = canvas(9.0, 4.3)
    # next-token probabilities after each prefix (the 3 likeliest tokens; they sum to 1), as in
    # notebook 10's example: greedy decoding takes A C <eos> (0.19), beam search finds B <eos> (0.36)
    next_probs = {
        "root": [("a", "A", 0.5), ("b", "B", 0.4), ("c", "C", 0.1)],
        "a": [("ac", "C", 0.4), ("ab", "B", 0.35), ("ae", "<eos>", 0.25)],
        "b": [("be", "<eos>", 0.9), ("ba", "A", 0.05), ("bc", "C", 0.05)],
        "ac": [("ace", "<eos>", 0.95), ("aca", "A", 0.03), ("acb", "B", 0.02)],
    }
    k = 2
    nodes = {"root": (0, "<bos>", 0.0, None, True)}  # name -> (step, token, log p, parent, kept)
    log_p = {"root": 0.0}
    finished = set()
    columns = [["root"]]
    frontier = ["root"]
    for step in range(1, 4):
        candidates = []  # (log-probability of the whole hypothesis, name, token, parent)
        for parent in frontier:
            if parent in finished:  # a finished hypothesis is its own single candidate
                candidates.append((log_p[parent], parent + "=", "(finished)", parent))
                continue
            for name, token, p in next_probs[parent]:
                candidates.append((log_p[parent] + math.log(p), name, token, parent))
        kept = {name for _, name, _, _ in sorted(candidates, reverse=True)[:k]}
        for logp, name, token, parent in candidates:
            nodes[name] = (step, token, logp, parent, name in kept)
            log_p[name] = logp
            if token == "<eos>" or parent in finished:
                finished.add(name)
        columns.append([name for _, name, _, _ in candidates])  # grouped by parent
        frontier = [name for name in columns[-1] if name in kept]
    xs = [0.65, 2.75, 4.95, 7.15]
    y_of = {}
    for step, names in enumerate(columns):
        for i, name in enumerate(names):
            y_of[name] = 2.2 if len(names) == 1 else 3.4 - i * 2.5 / (len(names) - 1)
    for name, (step, token, logp, parent, kept) in nodes.items():
        x, y = xs[step], y_of[name]
        text = token if parent is None else f"{token}   {logp:.2f}"
        box(ax, x - 0.65, y - 0.17, 1.3, 0.34, text, QUERY if kept else "white",
            QUERY_EDGE if kept else "#bbbbbb", size=9.5, color=INK if kept else MUTED)
        if parent is not None:
            arrow(ax, (xs[step - 1] + 0.65, y_of[parent]), (x - 0.65, y),
                  color="#555555" if kept else "#cccccc", lw=1.2 if kept else 0.8,
                  ls="-" if kept else "--")
    for step in range(4):
        label(ax, xs[step], 3.9, f"step {step}" if step else "start", size=10.5, weight="bold")
    label(ax, 4.5, 0.42, "Each box: the new token and the log-probability of the whole hypothesis; "
          "each kept unfinished one is extended by its 3 likeliest tokens,", size=9, color="#555555")
    label(ax, 4.5, 0.15, "a finished one competes as it is. Ranked by raw log-probability (α = 0), "
          "the k = 2 best survive (orange), the rest are pruned (grey).", size=9, color="#555555")
    return fig


def label_smoothing():
    """The target distribution: one-hot versus (1 - eps) one-hot + eps / V (07)."""
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.0), sharey=True)
    V, target, eps = 8, 3, 0.1
    one_hot = np.eye(V)[target]
    smoothed = (1 - eps) * one_hot + eps / V
    tokens = np.arange(V)
    for ax, dist, title in [(axes[0], one_hot, "one-hot target"),
                            (axes[1], smoothed, f"label smoothing, ε = {eps}")]:
        ax.bar(tokens, dist, color=[WEIGHT if i == target else "#e8a39b" for i in tokens])
        ax.set_title(title, fontsize=11, weight="bold")
        ax.set_xticks(tokens, [f"{i}" for i in tokens])
        ax.set_xlabel("token of the vocabulary (V = 8); the target is token 3", fontsize=9.5)
        ax.set_ylim(0, 1.12)
        ax.spines[["top", "right"]].set_visible(False)
        ax.text(target, dist[target] + 0.02, f"{dist[target]:.4g}", ha="center", fontsize=9)
    axes[0].set_ylabel("probability")
    axes[1].text(7.4, 0.6, f"1 − ε + ε/V = {smoothed[target]:.4f}\nε/V = {eps / V:.4f} "
                 "elsewhere", ha="right", fontsize=9.5, color="#555555")
    fig.tight_layout()
    return fig


def grouped_query_heads():
    """Which key-value head each query head reads: multi-head, grouped-query, multi-query (11)."""
    fig, ax = canvas(9.0, 3.3)
    h = 4
    panels = [(4, "multi-head attention", "g = h = 4"),
              (2, "grouped-query attention", "g = 2"),
              (1, "multi-query attention", "g = 1")]
    qw, qh, y_q, y_kv = 0.5, 0.32, 2.3, 0.9
    for p, (g, title, subtitle) in enumerate(panels):
        x0 = 0.2 + 3.0 * p
        label(ax, x0 + 1.3, 3.1, title, size=11, weight="bold")
        label(ax, x0 + 1.3, 2.82, subtitle, size=9.5, color="#555555")
        q_centres = [x0 + 0.2 + qw / 2 + i * 0.6 for i in range(h)]
        group = h // g  # query heads per key-value head
        for j in range(g):  # key-value head j: K above V, under the query heads it serves
            xc = sum(q_centres[j * group:(j + 1) * group]) / group
            box(ax, xc - qw / 2, y_kv + qh, qw, qh, f"K{j}", KEY, KEY_EDGE, size=9)
            box(ax, xc - qw / 2, y_kv, qw, qh, f"V{j}", VALUE, VALUE_EDGE, size=9)
            ax.add_patch(Rectangle((xc - qw / 2 - 0.04, y_kv - 0.04), qw + 0.08, 2 * qh + 0.08,
                                   fill=False, edgecolor=HEAD_COLOURS[j], linewidth=2.2))
            for i in range(j * group, (j + 1) * group):
                box(ax, q_centres[i] - qw / 2, y_q, qw, qh, f"Q{i}", QUERY, QUERY_EDGE, size=9)
                ax.add_patch(Rectangle((q_centres[i] - qw / 2 - 0.04, y_q - 0.04), qw + 0.08,
                                       qh + 0.08, fill=False, edgecolor=HEAD_COLOURS[j],
                                       linewidth=2.2))
                arrow(ax, (q_centres[i], y_q - 0.05), (xc, y_kv + 2 * qh + 0.05),
                      color="#666666", lw=1.1)
        label(ax, x0 + 1.3, 0.62, f"cached per token and layer: {g} key-value "
              f"head{'s' if g > 1 else ''}", size=9)
        label(ax, x0 + 1.3, 0.36, f"W_k, W_v: d_model × {g}·d_k", size=9, color="#555555")
    label(ax, 4.5, 0.08, "query head i reads key-value head i // (h/g): each colour is one group "
          "of h/g query heads sharing a key-value head", size=9, color="#555555")
    return fig


def online_softmax_tiles():
    """The online softmax over blocks of keys: one tile of scores at a time, a running max m
    and sum l per query (FlashAttention's tiles); both panels have 12 keys in blocks of 4 (11)."""
    fig, ax = canvas(9.0, 4.4)
    # Left: the T_q x T_k score matrix in tiles of 2 queries x 4 keys
    T_q, T_k, bq, bk, cell = 6, 12, 2, 4, 0.27
    x0, y0 = 0.45, 1.55
    label(ax, x0 + T_k * cell / 2, 4.15, "the scores, in tiles", size=11, weight="bold")
    label(ax, x0 + T_k * cell / 2, 3.87, "never all in memory at once", size=9,
          color="#555555")
    current_row, current_col = 1, 2  # the tile being computed
    for i in range(T_q):
        for j in range(T_k):
            r, c = i // bq, j // bk
            if r == current_row and c < current_col:
                face = "#f4c7c3"  # already folded into m, l, a
            elif r == current_row and c == current_col:
                face = WEIGHT  # the one tile held now
            else:
                face = "white"
            ax.add_patch(Rectangle((x0 + j * cell, y0 + (T_q - 1 - i) * cell), cell, cell,
                                   facecolor=face, edgecolor="#dddddd", linewidth=0.6))
    for c in range(T_k // bk + 1):
        ax.plot([x0 + c * bk * cell] * 2, [y0, y0 + T_q * cell], color="#555555", lw=1.3)
    for r in range(T_q // bq + 1):
        ax.plot([x0, x0 + T_k * cell], [y0 + r * bq * cell] * 2, color="#555555", lw=1.3)
    label(ax, x0 + T_k * cell / 2, y0 + T_q * cell + 0.2, "keys, in blocks of 4", size=9)
    label(ax, x0 - 0.2, y0 + T_q * cell / 2, "queries", size=9, rotation=90)
    for k_block in range(T_k // bk):
        label(ax, x0 + (k_block + 0.5) * bk * cell, y0 - 0.17, f"block {k_block + 1}", size=8.5)
    legend = [("#f4c7c3", "done: folded into m, ℓ, a"), (WEIGHT, "the one tile held now"),
              ("white", "not yet (other query blocks: in parallel)")]
    for n, (face, text) in enumerate(legend):
        ax.add_patch(Rectangle((x0, 0.95 - n * 0.25), 0.16, 0.14, facecolor=face,
                               edgecolor="#999999", linewidth=0.6))
        label(ax, x0 + 0.24, 1.02 - n * 0.25, text, size=8.5, ha="left")

    # Right: one query's scores, block by block, with its running max m and sum l
    scores = np.array([0.4, -1.2, 0.1, -0.3, 1.5, 0.2, -0.8, 0.9, 1.1, -0.5, 1.9, 0.3])
    blocks = [scores[0:4], scores[4:8], scores[8:12]]  # 12 keys, as in the left panel
    xr, c2 = 4.1, 0.4
    label(ax, xr + 2.3, 4.15, "one query, block by block", size=11, weight="bold")
    label(ax, xr + 2.3, 3.87, r"$m' = \max(m, \max_j s_j)$,   "
          r"$\ell' = e^{m - m'}\ell + \sum_j e^{s_j - m'}$", size=9.5)
    m, l = -np.inf, 0.0
    for b, block in enumerate(blocks):
        y = 3.05 - b * 0.85
        label(ax, xr + 0.3, y + c2 / 2, f"block {b + 1}", size=9, ha="center")
        for j, s in enumerate(block):
            box(ax, xr + 0.7 + j * c2, y, c2, c2, f"{s:+.1f}", "white", "#888888", size=8,
                rounded=False)
        m_new = max(m, block.max())
        correction = np.exp(m - m_new) if np.isfinite(m) else 0.0
        l = l * correction + np.exp(block - m_new).sum()
        note = ("" if b == 0 else "max unchanged: no rescaling" if m_new == m
                else f"max grew: ℓ, a × e^({m:.1f} − {m_new:.1f}) = × {correction:.2f}")
        m = m_new
        label(ax, xr + 0.7 + 4 * c2 + 0.15, y + c2 / 2 + 0.1, f"m = {m:.2f},  ℓ = {l:.2f}",
              size=9.5, ha="left")
        label(ax, xr + 0.7 + 4 * c2 + 0.15, y + c2 / 2 - 0.16, note, size=8, ha="left",
              color="#555555")
    exact = np.exp(scores - scores.max()).sum()
    assert abs(exact - l) < 1e-12 and m == scores.max()
    label(ax, xr + 2.3, 0.72, f"after the last block: m = max of all scores, ℓ = Σ e^(s − m) "
          f"= {l:.2f},", size=9)
    label(ax, xr + 2.3, 0.45, r"and $\mathbf{a} / \ell = \mathrm{softmax}(\mathbf{s})\,V$ "
          "exactly, the same for every block size", size=9)
    return fig


def decoder_only_lm():
    """The decoder-only language model: token ids -> embedding -> N pre-norm blocks, each with
    its own key-value cache -> final norm -> linear -> logits; and the caches growing by one
    position per generated token (12)."""
    fig, ax = canvas(9.0, 6.3)
    x, w, hb = 0.95, 2.3, 0.4
    xc = x + w / 2

    def layer(y, text, face, edge=NEUTRAL_EDGE, size=9.5):
        box(ax, x, y, w, hb, text, face, edge, size=size)
        return y + hb

    def plus(y):
        ax.add_patch(Circle((xc, y), 0.14, facecolor="white", edgecolor=INK))
        label(ax, xc, y, "+", size=11)

    def residual(y_from, y_plus):
        ax.plot([xc, x + w + 0.25, x + w + 0.25], [y_from, y_from, y_plus], color=WEIGHT, lw=1.4)
        arrow(ax, (x + w + 0.25, y_plus), (xc + 0.14, y_plus), color=WEIGHT, shrink=0)

    label(ax, xc, 6.1, "the model", size=11.5, weight="bold")
    top = layer(0.15, "token ids (B, T_new)", "white")
    arrow(ax, (xc, top), (xc, 0.75))
    top = layer(0.75, "embedding (no positions added)", NEUTRAL)
    arrow(ax, (xc, top), (xc, 1.55))
    # one block, pre-norm: X + attention(RMSNorm(X)), then + SwiGLU(RMSNorm(.))
    y_block = 1.45
    top = layer(1.55, "RMSNorm", NORM, "#b8a03a")
    arrow(ax, (xc, top), (xc, 2.1))
    attention_y = 2.1
    top = layer(attention_y, "causal GQA self-attention\nwith RoPE", ATTENTION, size=9)
    arrow(ax, (xc, top), (xc, 2.78), shrink=0)
    plus(2.92)
    residual(1.5, 2.92)
    arrow(ax, (xc, 3.06), (xc, 3.3), shrink=0)
    top = layer(3.3, "RMSNorm", NORM, "#b8a03a")
    arrow(ax, (xc, top), (xc, 3.85))
    top = layer(3.85, "SwiGLU feed-forward", FFN)
    arrow(ax, (xc, top), (xc, 4.53), shrink=0)
    plus(4.67)
    residual(3.18, 4.67)
    ax.add_patch(FancyBboxPatch((x - 0.3, y_block), w + 0.85, 4.9 - y_block, facecolor="none",
                                boxstyle="round,pad=0.02", edgecolor="#777777", linestyle="--"))
    label(ax, x - 0.55, (y_block + 4.9) / 2, "N ×", size=11)
    arrow(ax, (xc, 4.81), (xc, 5.05), shrink=0)
    top = layer(5.05, "final RMSNorm, linear", NEUTRAL)
    arrow(ax, (xc, top), (xc, 5.7))
    label(ax, xc, 5.8, "logits (B, T_new, V): the next token", size=9)

    # the block's cache, beside its attention
    cell = 0.3
    xk = x + w + 0.75
    label(ax, xk + 2 * cell, attention_y + 1.05, "this block's", size=9, color=KEY_EDGE)
    label(ax, xk + 2 * cell, attention_y + 0.82, "key-value cache", size=9, color=KEY_EDGE)
    for p in range(4):
        for row, (face, edge, name) in enumerate(((KEY, KEY_EDGE, "k"), (VALUE, VALUE_EDGE, "v"))):
            ax.add_patch(Rectangle((xk + p * cell, attention_y + 0.3 - row * cell), cell, cell,
                                   facecolor=face, edgecolor=edge, linewidth=1.0))
            label(ax, xk + (p + 0.5) * cell, attention_y + 0.3 - row * cell + cell / 2,
                  f"{name}{p + 1}", size=7.5)
    arrow(ax, (x + w, attention_y + 0.28), (xk, attention_y + 0.45), color=KEY_EDGE, lw=1.2)
    arrow(ax, (xk, attention_y + 0.1), (x + w, attention_y + 0.12), color=KEY_EDGE, lw=1.2)
    label(ax, xk + 2 * cell, attention_y - 0.22, "appends the new k, v;", size=8.5,
          color="#555555")
    label(ax, xk + 2 * cell, attention_y - 0.44, "reads all of them", size=8.5, color="#555555")

    # generating: the caches grow by one position per step
    xg = 5.55
    label(ax, xg + 1.6, 6.1, "generating", size=11.5, weight="bold")
    label(ax, xg + 1.6, 5.8, "each step feeds only the newest token", size=9, color="#555555")
    fed = [("<bos> i", 2), ("was", 1), ("<unk>", 1), (".", 1)]
    seen = 0
    for step, (tokens, new) in enumerate(fed):
        y = 5.05 - step * 0.95
        label(ax, xg - 0.05, y + 0.42, f"step {step + 1}: feeds {tokens!r}".replace("'", "\u2009"),
              size=9, ha="left")
        seen += new
        for p in range(6):
            face, edge, lw = ((KEY, KEY_EDGE, 1.0) if p < seen - new else
                              ("#7fb0ea", KEY_EDGE, 1.4) if p < seen else ("white", "#cccccc", 0.8))
            ax.add_patch(Rectangle((xg + p * cell, y - 0.2), cell, cell, facecolor=face,
                                   edgecolor=edge, linewidth=lw, linestyle="-" if p < seen else ":"))
        label(ax, xg + 6 * cell + 0.12, y - 0.05, f"cache: {seen} position{'s' if seen > 1 else ''}",
              size=8.5, ha="left", color="#555555")
    label(ax, xg + 1.6, 1.05, "dark: the positions this step adds,", size=9, color="#555555")
    label(ax, xg + 1.6, 0.8, "to the cache of every block", size=9, color="#555555")
    label(ax, xg + 1.6, 0.4, "the token chosen from the logits is fed next", size=9,
          color="#555555")
    return fig


def bahdanau_seq2seq():
    """The GRU encoder-decoder with Bahdanau attention, at decoder step i = 2 (08)."""
    fig, ax = canvas(9.0, 4.7)
    w, h, y = 0.66, 0.46, 1.3  # state boxes: width, height, bottom
    source = ["she", "runs", ".", "<eos>"]
    alphas = [0.15, 0.6, 0.2, 0.05]  # step 2 reads mostly "runs"
    fed, predicted = ["<bos>", "elle", "court"], ["elle", "court", "."]
    enc_x = [0.35 + 1.0 * j for j in range(4)]
    dec_x = [5.15 + 0.95 * i for i in range(4)]
    label(ax, 2.2, 4.5, "encoder: a GRU reads the source", size=11, weight="bold")
    label(ax, 2.2, 4.2, r"its states $\mathbf{h}_1, \ldots, \mathbf{h}_4$ are the keys and values",
          size=9, color="#555555")
    label(ax, 6.9, 4.5, "decoder: one GRU step per output word", size=11, weight="bold")
    label(ax, 6.9, 4.2, "shown at step i = 2; words fed below, predicted above", size=9,
          color="#555555")
    for j, (x, token) in enumerate(zip(enc_x, source)):
        box(ax, x, y, w, h, rf"$\mathbf{{h}}_{j + 1}$", KEY, KEY_EDGE)
        label(ax, x + w / 2, 0.52, token, size=10)
        arrow(ax, (x + w / 2, 0.68), (x + w / 2, y))
        if j:
            arrow(ax, (enc_x[j - 1] + w, y + h / 2), (x, y + h / 2))
    # s_0 from the encoder's last state
    arrow(ax, (enc_x[-1] + w, y + h / 2), (dec_x[0], y + h / 2), ls="--")
    label(ax, (enc_x[-1] + w + dec_x[0]) / 2, y + h / 2 - 0.22,
          r"$\tanh(W_s\mathbf{h}_\mathrm{last})$", size=8.5, color="#555555")
    for i, x in enumerate(dec_x):
        face, edge = (QUERY, QUERY_EDGE) if i == 1 else (NEUTRAL, NEUTRAL_EDGE)
        box(ax, x, y, w, h, rf"$\mathbf{{s}}_{i}$", face, edge, lw=2.0 if i == 2 else 1.2)
        if i:
            arrow(ax, (dec_x[i - 1] + w, y + h / 2), (x, y + h / 2))
            label(ax, x + w / 2, 0.52, fed[i - 1], size=10)
            arrow(ax, (x + w / 2, 0.68), (x + w / 2, y))
            label(ax, x + w / 2, 2.45, predicted[i - 1], size=10, color=WEIGHT if i == 2 else INK)
            arrow(ax, (x + w / 2, y + h), (x + w / 2, 2.3))
    # the attention of step 2: every encoder state, weighted; the query is s_1
    att_x, att_y, att_w, att_h = 3.05, 3.3, 1.9, 0.55
    box(ax, att_x, att_y, att_w, att_h, "additive attention\n" + r"softmax over $j$",
        ATTENTION, WEIGHT, size=9)
    for j, (x, alpha) in enumerate(zip(enc_x, alphas)):
        top = (x + w / 2, y + h)
        end = (att_x + 0.35 + j * 0.4, att_y)
        ax.plot([top[0], end[0]], [top[1], end[1]], color=WEIGHT, lw=0.6 + 7 * alpha,
                solid_capstyle="round", zorder=0)
        at = (top[0] + 0.25 * (end[0] - top[0]), top[1] + 0.25 * (end[1] - top[1]))
        label(ax, at[0] + 0.1, at[1], f"{alpha:.2f}", size=8.5, ha="left", color=WEIGHT,
              bbox=dict(facecolor="white", edgecolor="none", pad=1.0))
    arrow(ax, (dec_x[1] + 0.15, y + h), (att_x + att_w - 0.15, att_y), color=QUERY_EDGE, lw=1.6)
    label(ax, 5.5, 2.95, r"query $\mathbf{s}_1$", size=9.5, color=QUERY_EDGE, ha="left")
    ctx_x = 5.75
    box(ax, ctx_x, att_y, 1.35, att_h, r"context $\mathbf{c}_2$" + "\n"
        + r"$= \sum_j \alpha_{2j}\mathbf{h}_j$", VALUE, VALUE_EDGE, size=9)
    arrow(ax, (att_x + att_w, att_y + att_h / 2), (ctx_x, att_y + att_h / 2), color=VALUE_EDGE)
    arrow(ax, (ctx_x + 1.15, att_y), (dec_x[2] + 0.12, y + h), color=VALUE_EDGE, lw=1.6)
    # the output layer reads [s_2; c_2; e(y_1)]: dashed, c_2 and the word fed join s_2's arrow
    word_x = dec_x[2] + w / 2
    arrow(ax, (ctx_x + 1.3, att_y), (word_x + 0.2, 2.6), color=VALUE_EDGE, lw=1.0, ls="--")
    ax.plot([dec_x[2] + w + 0.02, dec_x[2] + w + 0.12, dec_x[2] + w + 0.12], [0.52, 0.52, 2.1],
            color="#444444", lw=1.0, ls="--", zorder=0)
    arrow(ax, (dec_x[2] + w + 0.12, 2.1), (word_x + 0.25, 2.33), lw=1.0, ls="--", shrink=0)
    label(ax, 4.5, 0.12, r"the previous state $\mathbf{s}_1$ asks, every encoder state answers "
          r"with its weight $\alpha_{2j}$ (line width); the GRU step to $\mathbf{s}_2$ reads the "
          "context and the word fed;\nthe prediction reads all three (dashed: the context and the "
          "word fed)", size=8.5, color="#555555")
    return fig


def translation_pipeline():
    """One training pair through notebook 07's pipeline, with the vocabularies' real indices:
    normalise, tokenise, look up, pad a batch, and shift the target into the decoder's input (07)."""
    fig, ax = canvas(9.0, 6.2)
    left, cell, h = 2.05, 0.62, 0.34  # where the rows start; a cell's width and height
    grey = "#555555"

    def stage(y, title, note):
        label(ax, 0.1, y + 0.1, title, size=10, ha="left", weight="bold")
        label(ax, 0.1, y - 0.17, note, size=8, ha="left", color=grey)

    def row(y, texts, faces, size=8.5, x0=left, width=cell):
        """Cells side by side from x0, centred on y; width: one for all, or one per cell."""
        widths = width if isinstance(width, list) else [width] * len(texts)
        for text, face, w in zip(texts, faces, widths):
            ax.add_patch(Rectangle((x0, y - h / 2), w, h, facecolor=face, edgecolor="white",
                                   linewidth=1.0))
            label(ax, x0 + w / 2, y, text, size=size, color=MUTED if face == MASKED else INK)
            x0 += w

    # 1. the raw pair, as a line of the file
    stage(5.85, "raw pair", "a line of the file")
    label(ax, left, 5.85, "Come along.", size=10, ha="left", family="monospace")
    label(ax, left + 1.45, 5.85, "⇥", size=10, ha="left", color=grey)
    label(ax, left + 1.8, 5.85, "Joignez-vous à nous.", size=10, ha="left", family="monospace")
    # 2. normalised and tokenised
    arrow(ax, (1.0, 5.55), (1.0, 5.2))
    stage(4.95, "normalise, tokenise", "lower case, space before . ! ?")
    row(4.95, ["come", "along", "."], [KEY] * 3, width=0.8)
    row(4.95, ["joignez-vous", "à", "nous", "."], [QUERY] * 4, x0=left + 2.8,
        width=[1.2, 0.8, 0.8, 0.8])
    # 3. the vocabularies
    arrow(ax, (1.0, 4.65), (1.0, 4.3))
    stage(4.05, "vocabularies", "from the training pairs;\n4 reserved tokens first")
    label(ax, left, 4.15, "0 <unk>   1 <pad>   2 <bos>   3 <eos>   then by frequency:",
          size=8.5, ha="left", family="monospace")
    label(ax, left, 3.88, "English: come 38, . 4; along, seen only once, has no entry: <unk> 0",
          size=8.5, ha="left", color=KEY_EDGE)
    label(ax, left, 3.63, "French: joignez-vous 832, à 25, nous 9, . 4", size=8.5, ha="left",
          color=QUERY_EDGE)
    # 4. indices, <eos>, padding: a batch of rows with valid lengths
    arrow(ax, (1.0, 3.55), (1.0, 3.2))
    stage(2.95, "ids, + <eos>, padded", "num_steps = 10; a batch\nholds B rows, (B, 10)")
    batch = [[38, 0, 4, 3], [38, 70, 48, 4, 3], [38, 561, 12, 3]]  # come along / on in / quick
    for r, ids in enumerate(batch):
        y = 3.05 - r * h
        ids = ids + [1] * (10 - len(ids))
        row(y, [str(i) for i in ids], [KEY if i != 1 else MASKED for i in ids], width=0.5)
        label(ax, left + 5.1, y, f"valid length {10 - ids.count(1)}", size=8, ha="left")
    ax.plot([left + 5 * 0.5] * 2, [3.05 + h / 2 + 0.05, 3.05 - 2.5 * h - 0.05], color=WEIGHT,
            lw=1.3, ls="--")
    label(ax, left + 2.5, 3.05 - 2.5 * h - 0.17, "bucketed: the batch is cut at its longest row",
          size=8, color=WEIGHT, ha="left")
    # 5. the target and the decoder's input, shifted by one
    arrow(ax, (1.0, 1.75), (1.0, 1.4))
    stage(1.1, "decoder input", "<bos> + target[:-1]")
    stage(0.35, "target", "the tokens + <eos>")
    target = ["joignez-vous", "à", "nous", ".", "<eos>"] + ["<pad>"] * 5
    fed = ["<bos>"] + target[:-1]
    width = 0.66
    row(1.1, fed, [QUERY if t != "<pad>" else MASKED for t in fed], size=7, width=width)
    row(0.35, target, [QUERY if t != "<pad>" else MASKED for t in target], size=7, width=width)
    for k in range(5):  # position k reads fed[k] and is trained to predict target[k]
        x = left + (k + 0.5) * width
        arrow(ax, (x, 1.1 - h / 2), (x, 0.35 + h / 2), color=WEIGHT, lw=1.1, shrink=1)
    label(ax, left + 5.2 * width, 0.72, "position t reads the decoder input at t\nand is "
          "trained to predict the target at t", size=8, ha="left", color=WEIGHT)
    return fig


# The diagrams, by file name; the notebooks that show each are found by tests/test_diagrams.py.
DIAGRAMS = {
    "attention_cues": attention_cues,
    "attention_pooling": attention_pooling,
    "masked_softmax": masked_softmax,
    "scaled_dot_product_and_multihead": scaled_dot_product_and_multihead,
    "split_merge_heads": split_merge_heads,
    "cnn_rnn_self_attention": cnn_rnn_self_attention,
    "transformer": transformer,
    "kv_cache": kv_cache,
    "beam_search": beam_search,
    "label_smoothing": label_smoothing,
    "grouped_query_heads": grouped_query_heads,
    "online_softmax_tiles": online_softmax_tiles,
    "decoder_only_lm": decoder_only_lm,
    "bahdanau_seq2seq": bahdanau_seq2seq,
    "translation_pipeline": translation_pipeline,
}


# ---------------------------------------------------------------------------------------------
# Files, embedded copies, checks


def render(name: str) -> bytes:
    """The PNG bytes of diagram ``name`` (no timestamp or version in the file: reproducible)."""
    from PIL import Image

    fig = DIAGRAMS[name]()
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    plt.close(fig)
    # 256 colours are plenty for flat diagrams and make the file (and each notebook that embeds
    # it) about three times smaller
    image = Image.open(drawn).convert("RGB").quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    image.save(buffer, format="png", optimize=True)
    return buffer.getvalue()


def path_of(name: str) -> pathlib.Path:
    return IMG_DIR / f"{name}.png"


# ![description](data:image/png;base64,... "img/name.png")
EMBEDDED = re.compile(r'!\[(?P<alt>[^\]]*)\]\(data:image/png;base64,(?P<data>[A-Za-z0-9+/=]+)'
                      r'(?:\s+"(?P<title>[^"]*)")?\)')
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)[^)]*\)|<img\s[^>]*src=[\"'](?P<src>[^\"']+)")


def markdown(name: str, description: str) -> str:
    """The source of a markdown cell that shows diagram ``name``, with ``description`` as alt text."""
    data = base64.b64encode(path_of(name).read_bytes()).decode("ascii")
    return f'![{description}](data:image/png;base64,{data} "img/{name}.png")'


def embedded_copies_of_source(source: str) -> list[tuple[str, bytes]]:
    """(title, decoded bytes) of every PNG data URI in a markdown cell's source."""
    return [(m["title"] or "", base64.b64decode(m["data"])) for m in EMBEDDED.finditer(source)]


def embedded_copies(notebook_path: pathlib.Path) -> list[tuple[str, bytes]]:
    """(title, decoded bytes) of every PNG data URI in the notebook's markdown cells."""
    notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
    copies = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            copies += embedded_copies_of_source(source)
    return copies


def refresh_notebook(notebook_path: pathlib.Path) -> bool:
    """Replace every embedded copy of a diagram by the current file; True if something changed."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)

    def current(match: re.Match) -> str:
        title = match["title"] or ""
        if not title.startswith("img/") or pathlib.Path(title).stem not in DIAGRAMS:
            return match[0]
        data = base64.b64encode(path_of(pathlib.Path(title).stem).read_bytes()).decode("ascii")
        return f'![{match["alt"]}](data:image/png;base64,{data} "{title}")'

    changed = False
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            new = EMBEDDED.sub(current, cell.source)
            changed, cell.source = changed or new != cell.source, new
    if changed:
        nbformat.write(notebook, notebook_path)
    return changed


def same_picture(a: bytes, b: bytes) -> bool:
    """Whether two PNGs show the same picture: same size, and at most a few pixels differing by
    more than a quarter of the intensity range (anti-aliasing may differ between versions of
    matplotlib and FreeType; a moved box or a changed label changes far more pixels)."""
    from PIL import Image

    first, second = (np.asarray(Image.open(io.BytesIO(x)).convert("RGB"), dtype=int) for x in (a, b))
    if first.shape != second.shape:
        return False
    return int((np.abs(first - second).max(axis=-1) > 64).sum()) <= 20


def stale() -> list[str]:
    """What is out of date: diagram files that differ from what this script draws, and embedded
    copies that differ from their file."""
    problems = []
    for name in DIAGRAMS:
        if not path_of(name).exists():
            problems.append(f"img/{name}.png is missing")
        elif not same_picture(render(name), path_of(name).read_bytes()):
            problems.append(f"img/{name}.png differs from what img/draw.py draws")
    for notebook in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")):
        for title, data in embedded_copies(notebook):
            file = ROOT / title
            if title.startswith("img/") and file.exists() and data != file.read_bytes():
                problems.append(f"{notebook.name} embeds an old copy of {title}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report what is out of date (exit status 1 if anything is)")
    parser.add_argument("--markdown", metavar="NAME",
                        help="print the markdown that embeds diagram NAME in a notebook")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(args.markdown, args.markdown.replace("_", " ")))
        return 0
    if args.check:
        problems = stale()
        print("\n".join(problems) if problems else "every diagram and embedded copy is up to date")
        return 1 if problems else 0
    for name in DIAGRAMS:
        data = render(name)
        if not path_of(name).exists() or not same_picture(data, path_of(name).read_bytes()):
            path_of(name).write_bytes(data)
            print(f"wrote img/{name}.png")
    for notebook in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")):
        if refresh_notebook(notebook):
            print(f"refreshed the diagrams embedded in {notebook.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
