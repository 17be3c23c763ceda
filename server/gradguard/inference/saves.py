"""The saves one run has made, by storage: what a write asks for is the saves on the storages it writes.

A write invalidates the pending saves of its storage, so ``Interpreter._inplace`` asks for those only; a scan of
every save the function made cost each write the size of the whole run (quadratic: a fuzzed statement of 10,000
in-place calls took minutes).  Saves stay in the order they were made (their ids increase), which is the order
the rules read them in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from .values import Save

# Saves kept per storage: the first half and the latest half of this many.  A write then still conflicts with the
# first save of its storage (which messages name) and with the ones made just before it; only the middle of a
# storage saved more often than this (unrolled or fuzzed code) is forgotten, as ``_few_of_each`` does per op.
SAVES_KEPT_PER_STORAGE = 256


class SaveLog:
    """Saves in the order they were made, indexed by the id of the storage they saved."""

    def __init__(self) -> None:
        self._by_storage: dict[int, list[Save]] = {}
        self.last_id = 0  # the id of the latest save added
        self._kinds: set[tuple[int, str]] = set()  # (op node, role) of every save ever added

    @property
    def kinds(self) -> int:
        """How many different (op, role) saves were ever added: grows when an op saves something it did not."""
        return len(self._kinds)

    def add(self, save: Save) -> None:
        self.last_id = max(self.last_id, save.id)
        self._kinds.add((id(save.node), save.role))
        kept = self._by_storage.setdefault(save.storage.id, [])
        if len(kept) >= SAVES_KEPT_PER_STORAGE:
            del kept[SAVES_KEPT_PER_STORAGE // 2]  # the oldest of the latest half
        kept.append(save)

    def on(self, storages: Iterable[int]) -> Iterator[Save]:
        """The saves of these storages (each storage's in the order made)."""
        for storage in storages:
            yield from self._by_storage.get(storage, ())

    def __iter__(self) -> Iterator[Save]:
        for kept in self._by_storage.values():
            yield from kept

    def take_after(self, last_id: int) -> list[Save]:
        """Take out the saves added after the one whose id was ``last_id``, to put them back later with
        ``put_back``: an ``else`` branch must not see the saves its ``if`` body made."""
        taken: list[Save] = []
        for kept in self._by_storage.values():
            cut = bisect.bisect_right(kept, last_id, key=lambda s: s.id)
            taken.extend(kept[cut:])
            del kept[cut:]
        return taken

    def put_back(self, saves: Iterable[Save]) -> None:
        """Saves taken out by ``take_after``, each in its place by the order made."""
        for save in saves:
            kept = self._by_storage.setdefault(save.storage.id, [])
            bisect.insort(kept, save, key=lambda s: s.id)
