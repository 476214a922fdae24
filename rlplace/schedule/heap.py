"""Binary min-heaps on (float key, int key) pairs, stored in ``kf/ki[base : base + size]``.

Several heaps can share one pair of arrays, each in its own slice (one per device). Ties on the
float key go to the smaller int key, which is how the execution model breaks ties by op index.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True)
def less(af, ai, bf, bi):  # pragma: no cover - compiled
    return af < bf or (af == bf and ai < bi)


@numba.njit(cache=True)
def push(kf, ki, base, size, f, i):  # pragma: no cover - compiled
    """Add (f, i); returns the new size."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not less(f, i, kf[base + parent], ki[base + parent]):
            break
        kf[base + pos] = kf[base + parent]
        ki[base + pos] = ki[base + parent]
        pos = parent
    kf[base + pos] = f
    ki[base + pos] = i
    return size + 1


@numba.njit(cache=True)
def pop(kf, ki, base, size):  # pragma: no cover - compiled
    """Remove the smallest entry; returns (its float key, its int key, the new size)."""
    top_f = kf[base]
    top_i = ki[base]
    size -= 1
    # Sift the last entry down from the root; with none left this rewrites the root's slot,
    # now outside the heap. One path through keeps numba's reference counting out of the loop.
    lf = kf[base + size]
    li = ki[base + size]
    pos = 0
    c = 1
    while c < size:
        if c + 1 < size and less(kf[base + c + 1], ki[base + c + 1], kf[base + c], ki[base + c]):
            c += 1
        if not less(kf[base + c], ki[base + c], lf, li):
            break
        kf[base + pos] = kf[base + c]
        ki[base + pos] = ki[base + c]
        pos = c
        c = 2 * pos + 1
    kf[base + pos] = lf
    ki[base + pos] = li
    return top_f, top_i, size
