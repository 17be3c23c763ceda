"""The walks over the interpreter's values that dispatch on each value's type once per type (``forget_dtypes``,
``sharing.storages_in``) reach what the per-value ``isinstance`` chains reached: through lists, tuples, dicts and
instances' fields, aliasing and cycles kept."""

from __future__ import annotations

import ast

from gradguard.inference.dtypes import forget_dtypes
from gradguard.inference.sharing import storages_in
from gradguard.inference.values import (Const, DataAlias, FunctionValue, ModuleValue, NumberFrom, TensorMap,
                                        TensorSeq, new_tensor)


def _typed(label: str):
    t = new_tensor(None, label=label)
    t.dtype = "float32"
    return t


def test_forget_dtypes_reaches_every_held_tensor_and_layer() -> None:
    a, b, c, d = (_typed(n) for n in "abcd")
    inner = ModuleValue("Linear", True, attrs={"weight": a})
    inner.dtype = "float32"
    outer = ModuleValue("Net", False, attrs={"layers": [inner, (b,)], "table": {"k": TensorSeq([c])}})
    outer.attrs["self"] = outer  # a cycle
    closure = FunctionValue(ast.parse("def f(): pass").body[0], scope=[{"t": d}])
    outer.attrs["hook"] = closure
    forget_dtypes(outer)
    assert [t.dtype for t in (a, b, c, d)] == [None] * 4 and inner.dtype is None and outer.dtype is None


def test_storages_in_follows_the_held_depth() -> None:
    a, b, c = (new_tensor(None) for _ in range(3))
    value = ModuleValue("Net", False, attrs={"x": a, "seq": TensorSeq([b]), "map": TensorMap({"c": c}),
                                             "n": Const(1)})
    assert storages_in(value) == {a.storage.id, b.storage.id, c.storage.id}
    assert storages_in(value, depth=1) == {a.storage.id}
    assert storages_in(DataAlias(a)) == {a.storage.id}
    assert storages_in(NumberFrom(frozenset(), None, frozenset(), array_of=b)) == {b.storage.id}
    assert storages_in(Const(1)) == set() and storages_in(None) == set()


def test_untyped_copy_forgets_what_forget_dtypes_forgets_on_the_copy_only() -> None:
    """``copy_values(untyped=True)`` (a method's ``self``) is ``forget_dtypes`` of the copy, done in the copy's walk:
    every held tensor and layer of the copy has no dtype; the original keeps its dtypes; aliasing is kept."""
    from gradguard.inference.values import copy_values

    a, b, c, d = (_typed(n) for n in "abcd")
    inner = ModuleValue("Linear", True, attrs={"weight": a})
    inner.dtype = "float32"
    outer = ModuleValue("Net", False, attrs={"layers": [inner, (b,)], "table": {"k": TensorSeq([c])}, "same": a})
    outer.attrs["self"] = outer
    outer.attrs["hook"] = FunctionValue(ast.parse("def f(): pass").body[0], scope=[{"t": d}])
    copied = copy_values({"self": outer}, untyped=True)["self"]
    reference = copy_values({"self": outer})["self"]
    forget_dtypes(reference)
    held = [copied.attrs["layers"][0], copied.attrs["layers"][0].attrs["weight"], copied.attrs["layers"][1][0],
            copied.attrs["table"]["k"].items[0], copied.attrs["hook"].scope[0]["t"], copied]
    assert [v.dtype for v in held] == [None] * 6
    assert copied.attrs["same"] is copied.attrs["layers"][0].attrs["weight"] and copied.attrs["self"] is copied
    assert [t.dtype for t in (a, b, c, d)] == ["float32"] * 4 and inner.dtype == "float32"
    assert reference.attrs["layers"][1][0].dtype is None and reference.attrs["table"]["k"].items[0].dtype is None


def test_a_copy_no_longer_used_is_freed_without_the_cyclic_collector() -> None:
    """``copy_values``' walk holds itself (a recursive closure) and its memo of every copy: it is let go when the
    copy is made, so a copy nothing holds is freed at once, not left to the collector (a cost per analysed file)."""
    import gc
    import weakref

    from gradguard.inference.values import copy_values

    layer = ModuleValue("Linear", True, attrs={"weight": new_tensor(None)})
    enabled = gc.isenabled()
    gc.disable()
    try:
        copied = copy_values({"layer": layer})["layer"]
        held = weakref.ref(copied.attrs["weight"])
        del copied
        assert held() is None
    finally:
        if enabled:
            gc.enable()
