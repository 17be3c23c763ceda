"""Does a write touch the elements a saved tensor holds?  Both are strided views of one storage: the
answer is exact (a small integer search), with a mask or a "yes" when the search would be too large."""

from __future__ import annotations

import torch


def geometry_of(t) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    return t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.element_size()


_MASK_LIMIT = 1 << 24  # elements; beyond this a possible overlap counts as an overlap
_SEARCH_BUDGET = 20000


class _TooHard(Exception):
    pass


def _solvable(target: int, terms: list[tuple[int, int, int]]) -> bool:
    """Is ``target == sum(coef * k)`` for integers ``lo <= k <= hi``, one k per (coef, lo, hi) term
    (coef > 0)?  Depth-first over the terms, largest coefficient first, pruned by what the remaining
    terms can still add; terms with the same coefficient are merged first (two views of one layout,
    like the chunks of a tensor, then take one step per dimension)."""
    merged: dict[int, list[int]] = {}
    for coef, lo, hi in terms:
        if coef in merged:
            merged[coef][0] += lo
            merged[coef][1] += hi
        else:
            merged[coef] = [lo, hi]
    ordered = sorted(((c, lo, hi) for c, (lo, hi) in merged.items()), reverse=True)
    lows, highs = [0] * (len(ordered) + 1), [0] * (len(ordered) + 1)
    for i in range(len(ordered) - 1, -1, -1):
        coef, lo, hi = ordered[i]
        lows[i] = lows[i + 1] + coef * lo
        highs[i] = highs[i + 1] + coef * hi
    budget = [_SEARCH_BUDGET]

    def search(i: int, rest: int) -> bool:
        if not lows[i] <= rest <= highs[i]:
            return False
        if i == len(ordered):
            return rest == 0
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooHard
        coef, lo, hi = ordered[i]
        # rest - coef*k must stay within what the remaining terms can make
        first = max(lo, -(-(rest - highs[i + 1]) // coef))
        last = min(hi, (rest - lows[i + 1]) // coef)
        for k in range(first, last + 1):
            if search(i + 1, rest - coef * k):
                return True
        return False

    return search(0, target)


def overlaps(a, b) -> bool:
    """Whether two strided views of one storage share an element (exact for same-dtype views)."""
    (off_a, shape_a, stride_a, size_a), (off_b, shape_b, stride_b, size_b) = a, b
    if 0 in shape_a or 0 in shape_b:
        return False
    if any(st < 0 for st in stride_a + stride_b) or size_a != size_b:
        return True

    def extent(off, shape, stride):
        return off, off + sum((n - 1) * st for n, st in zip(shape, stride))

    lo_a, hi_a = extent(off_a, shape_a, stride_a)
    lo_b, hi_b = extent(off_b, shape_b, stride_b)
    if hi_a < lo_b or hi_b < lo_a:
        return False
    # An element of a at the place of an element of b: sum(i*sa) - sum(j*sb) == off_b - off_a.
    terms = [(st, 0, n - 1) for n, st in zip(shape_a, stride_a) if n > 1 and st] + \
            [(st, 1 - n, 0) for n, st in zip(shape_b, stride_b) if n > 1 and st]
    try:
        return _solvable(off_b - off_a, terms)
    except _TooHard:
        pass
    if max(hi_a, hi_b) + 1 > _MASK_LIMIT:
        return True
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():
        mask = torch.zeros(max(hi_a, hi_b) + 1, dtype=torch.bool)
        mask.as_strided(shape_a, stride_a, off_a).fill_(True)
        return bool(mask.as_strided(shape_b, stride_b, off_b).any())
