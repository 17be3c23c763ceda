"""What the probe's watchers share about what they keep of the user's run: tables of tensors held by weak reference,
whose entry goes when its tensor does, and the patches and hooks a watcher takes back when it is uninstalled."""

from __future__ import annotations


def forgetter(table: dict, key):
    """A weakref callback that drops ``table[key]`` (an entry whose first item is the weak reference) when its
    object dies, unless the entry is by then another object's (``id``s are reused)."""
    def forget(ref):
        entry = table.get(key)
        if entry is not None and entry[0] is ref:
            del table[key]
    return forget


class Undoing:
    """A watcher whose ``install`` appends to ``_undo`` how to take back each patch or hook it made."""

    _undo: list

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()
