"""Walking an autograd graph from a backward's roots.  Imports torch."""

from __future__ import annotations

from typing import Iterator

import torch

_Tensor = torch.Tensor
WALK_LIMIT = 200_000  # nodes visited per walk (a graph that large is walked only in part)


def root_nodes(roots) -> list:
    """The autograd nodes of ``roots`` (tensors or GradientEdges)."""
    nodes = []
    for root in roots if isinstance(roots, (tuple, list)) else (roots,):
        node = root.grad_fn if isinstance(root, _Tensor) else getattr(root, "node", None)
        if node is not None:
            nodes.append(node)
    return nodes


def walk(roots) -> Iterator:
    """Every node a backward from ``roots`` reaches, each once, with the nodes it passes gradient to:
    ``(node, [next nodes])``.  An ``AccumulateGrad`` node is a leaf's (``node.variable``)."""
    stack = root_nodes(roots)
    seen: set[int] = set()
    while stack and len(seen) < WALK_LIMIT:
        node = stack.pop()
        leaf = getattr(node, "variable", None)
        # Every AccumulateGrad has the same sequence number; its leaf tells them apart (a wrapper's id may be reused).
        key = node._sequence_nr() if leaf is None else ("leaf", id(leaf))
        if key in seen:
            continue
        seen.add(key)
        nexts = [n for n, _ in node.next_functions if n is not None]
        yield node, nexts
        stack.extend(nexts)


def leaves_of(t) -> list:
    """The leaves that require grad upstream of ``t`` (``t`` itself when it is one)."""
    if t.grad_fn is None:
        return [t] if t.requires_grad else []
    return [leaf for leaf in (getattr(node, "variable", None) for node, _ in walk([t])) if leaf is not None]
