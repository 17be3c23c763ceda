"""Writes to an enclosing function's or the module's names (``nonlocal``, ``global``) made on a path that may not run.

A local written in one branch of an ``if`` (or in a loop that may run no time) is joined with what the other path
left when the paths meet (``merge_states``).  A name of an enclosing scope lives in that scope's dict, not in the
running frame's state, so the same join is made here: each construct that joins its paths' states notes where its
paths begin (``begin``), takes each path's writes (``take``: the values before are put back, so the next path starts
from them) and joins them at the end (``end``), a path that did not write a name keeping the value it had before.
Writes to the joining frame's own variables are left to its state's join (a closure defined there writes them)."""

from __future__ import annotations

from .values import Value, grown, join

_ABSENT = object()  # a name the scope did not hold before the write

Written = dict[tuple[int, str], tuple[dict[str, Value], str, object, object]]  # -> (scope, name, before, now)


class OuterWrites:
    def __init__(self) -> None:
        self.log: list[tuple[dict[str, Value], str, object]] = []  # (scope, name, value before the write)
        self.depth = 0  # constructs begun and not ended: nothing is noted outside them

    def note(self, scope: dict[str, Value], name: str) -> None:
        """``name`` of ``scope`` is about to be written."""
        if self.depth:
            self.log.append((scope, name, scope.get(name, _ABSENT)))

    def begin(self) -> int:
        self.depth += 1
        return len(self.log)

    def take(self, mark: int, live: dict[str, Value]) -> Written:
        """The names of scopes other than ``live`` written since ``mark``, with the value each had before and has now;
        the values before are put back."""
        written: Written = {}
        for scope, name, before in self.log[mark:]:
            if scope is not live and (id(scope), name) not in written:
                written[id(scope), name] = (scope, name, before, scope.get(name, _ABSENT))
        for scope, name, before, _ in written.values():
            if before is _ABSENT:
                scope.pop(name, None)
            else:
                scope[name] = before
        return written

    def end(self, paths: list[Written], after_loop: bool = False) -> None:
        """The paths met: each name one of them wrote holds the join of their values (of the value before, on a path
        that did not write it; one no path bound stays unbound).  After a loop (``paths``: none ran, the
        iterations) a list it grew is the grown list."""
        self.depth -= 1
        keys = {key: path[key] for path in paths for key in path}
        for key, (scope, name, before, _) in keys.items():
            values = [v for v in (path[key][3] if key in path else before for path in paths) if v is not _ABSENT]
            merged = values[0] if values else _ABSENT
            for value in values[1:]:
                merged = merged if merged is value else (after_loop and grown(merged, value)) or join(merged, value)
            if merged is not _ABSENT:
                scope[name] = merged
        if not self.depth:
            self.log.clear()
