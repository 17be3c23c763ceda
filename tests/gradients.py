"""The one comparison of gradient lists that every torch proof uses (fixtures, fixes, variants)."""

from __future__ import annotations


def grads_equal(a, b) -> bool:
    """Same length, ``None`` where the other is ``None``, else same shape and values within float32 noise."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is None or y is None:
            if not (x is None and y is None):
                return False
        elif x.shape != y.shape or not x.allclose(y, rtol=1e-4, atol=1e-5):
            return False
    return True
