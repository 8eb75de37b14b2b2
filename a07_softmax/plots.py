"""Small drawing helpers for the notebooks."""
from __future__ import annotations


def butterfly(lanes, combine):
    """Simulate an xor-shuffle all-reduce over len(lanes) lanes (a power of two).
    Returns [(0, lanes), (k, states after the step with offset k), ...]: the lane values a GPU
    warp holds after each step. After the last step every lane holds the full result."""
    n = len(lanes)
    if n & (n - 1):
        raise ValueError("the butterfly needs a power-of-two lane count")
    steps, cur, k = [(0, list(lanes))], list(lanes), n // 2
    while k:
        cur = [combine(cur[i], cur[i ^ k]) for i in range(n)]
        steps.append((k, cur))
        k //= 2
    return steps


def draw_butterfly(steps, ax=None):
    """Draw the butterfly: lanes as columns, steps as rows, the pairs exchanged at each step."""
    import matplotlib.pyplot as plt

    n = len(steps[0][1])
    ax = ax or plt.subplots(figsize=(1.4 * n, 1.3 * len(steps)))[1]
    for r, (k, states) in enumerate(steps):
        for i, st in enumerate(states):
            ax.text(i, -r, f"m={st.m:.2f}\ns={st.s:.2f}", ha="center", va="center", fontsize=7,
                    bbox=dict(boxstyle="round", fc="#E0F2FE" if r < len(steps) - 1 else "#A7F3D0", ec="#0891B2"))
        if r + 1 < len(steps):
            kk = steps[r + 1][0]
            for i in range(n):
                ax.annotate("", xy=(i, -(r + 1) + 0.25), xytext=(i ^ kk, -r - 0.25),
                            arrowprops=dict(arrowstyle="->", color="#64748B", lw=0.7))
    ax.set_yticks([-r for r in range(len(steps))],
                  ["lanes"] + [f"xor {k}" for k, _ in steps[1:]])
    ax.set_xticks(range(n), [f"lane {i}" for i in range(n)])
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(-len(steps) + 0.5, 0.5)
    ax.set_title("combine() in an xor butterfly: every lane ends with the row's (m, s)")
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    return ax
