"""The per-document cache keys a function by the names it can resolve outside itself (``scopes.free_names``), not
by every word of its text: its own locals, attribute names and strings do not tie it to the rest of the file.
Each hazard of that is pinned here: after the edit, the cached analysis must equal a fresh one."""

from __future__ import annotations

import textwrap

import pytest

from gradguard.api import analyze_source
from test_cache import _findings, runs  # noqa: F401 (runs: the fixture counting the units really analysed)


def _cached_equals_fresh(before: str, after: str) -> list:
    cache: dict = {}
    analyze_source(before, "n.py", cache=cache, fixes=False)
    cached = _findings(analyze_source(after, "n.py", cache=cache, fixes=False))
    fresh = _findings(analyze_source(after, "n.py", fixes=False))
    assert cached == fresh
    return fresh


LOCAL_WITHOUT_VALUE = textwrap.dedent('''
    import torch

    w = torch.zeros(3, requires_grad=True)


    def f():
        w = torch.zeros(3)
        del w
        w.add_(1)
''')


def test_a_local_without_a_value_is_never_the_module_variable_of_its_name():
    """``w`` is ``f``'s local (Python raises UnboundLocalError at ``w.add_``): the module's ``w``, which ``f``'s key
    leaves out, must not be read in its place, or editing it would leave ``f``'s cached findings stale."""
    edited = LOCAL_WITHOUT_VALUE.replace("w = torch.zeros(3, requires_grad=True)", "w = torch.zeros(3)")
    for before, after in ((LOCAL_WITHOUT_VALUE, edited), (edited, LOCAL_WITHOUT_VALUE)):
        assert _cached_equals_fresh(before, after) == []


LOCAL_CLASS = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def build(x):
        class Block(nn.Module):
            def forward(self, x):
                return x * 2
        y = torch.sigmoid(x)
        return Block()(y)


    def train():
        x = torch.randn(3, requires_grad=True)
        out = build(x)
        out.sum().backward()


    class Block(nn.Module):
        def forward(self, x):
            return x + 1
''')


def test_a_class_defined_in_a_function_is_looked_up_by_name_so_its_name_stays_in_the_key():
    """A class statement inside a function is resolved among the file's classes by name (the last of that name
    wins): editing the module's ``Block`` changes what ``build`` builds, though ``build`` binds ``Block`` itself."""
    edited = LOCAL_CLASS.replace("return x + 1", "return x.add_(1)")
    fresh = _cached_equals_fresh(LOCAL_CLASS, edited)
    assert any(code == "GG001" for _, code, _ in fresh)


METHOD_INIT_HELPER = textwrap.dedent('''
    import torch
    import torch.nn as nn


    def make_act():
        return nn.ReLU(inplace=False)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.act = make_act()

        def forward(self, x):
            y = torch.sigmoid(self.lin(x))
            z = self.act(y)
            y.mul_(2)
            return z
''')


def test_a_method_follows_what_its_class_names():
    """``forward`` reads ``self.act``, which ``__init__`` built by calling ``make_act``: editing ``make_act``
    re-analyses ``forward`` though its own text never names it."""
    edited = METHOD_INIT_HELPER.replace("inplace=False", "inplace=True")
    fresh = _cached_equals_fresh(METHOD_INIT_HELPER, edited)
    assert len(fresh) == 2


VARIABLE_AND_FUNCTION = textwrap.dedent('''
    import torch

    bias = torch.zeros(3, requires_grad=True)


    def shift():
        bias.add_(1)


    def bias():
        pass
''')


def test_a_name_bound_at_the_top_level_and_defined_as_a_function_follows_both():
    """The module's variables are looked up before its functions: ``shift`` reads the tensor ``bias``."""
    edited = VARIABLE_AND_FUNCTION.replace("torch.zeros(3, requires_grad=True)", "torch.zeros(3)")
    assert _cached_equals_fresh(edited, VARIABLE_AND_FUNCTION) != []


GLOBALS_GIVEN = textwrap.dedent('''
    import torch

    WEIGHT = torch.zeros(3, requires_grad=True)


    def weight():
        return WEIGHT


    def f():
        n = 2
        z = weight()
        z.mul_(n)
''')


def test_a_module_binding_of_a_name_a_function_uses_as_a_local_changes_whether_it_sees_module_variables():
    """A function is given the module's variables when its text names one (``_ModuleEnvironment.for_function``):
    binding ``n`` at the top level lets ``f``'s call of ``weight`` read ``WEIGHT``, so ``f`` is analysed again."""
    edited = GLOBALS_GIVEN.replace("import torch\n", "import torch\nn = 0\n", 1)
    for before, after in ((GLOBALS_GIVEN, edited), (edited, GLOBALS_GIVEN)):
        _cached_equals_fresh(before, after)


TABLE = textwrap.dedent('''
    import torch

    CONFIGS = {"scaled": dict(width=2), "plain": dict(width=1)}
    for n in CONFIGS:
        c = CONFIGS[n]


    def scaled(x):
        y = torch.sigmoid(x)
        y.mul_(2)
        return y


    def plain(x):
        n = x.shape[0]
        c = torch.exp(x)
        c.div_(n)
        return c
''')


def test_a_function_is_not_tied_to_strings_or_to_module_bindings_of_its_own_locals(runs):
    """Editing ``scaled`` (named only in the table's strings) does not run the module's top level again, and
    neither does it re-analyse ``plain``, whose local ``n`` and ``c`` the top-level loop also binds."""
    cache: dict = {}
    analyze_source(TABLE, "t.py", cache=cache, fixes=False)
    runs.clear()
    edited = TABLE.replace("y.mul_(2)", "y.mul_(3)")
    result = analyze_source(edited, "t.py", cache=cache, fixes=False)
    assert runs == ["scaled"]
    assert _findings(result) == _findings(analyze_source(edited, "t.py", fixes=False))


def test_type_stays_a_free_name_of_a_function_that_binds_it():
    """``type(x)`` is Python's ``type`` only when no scope binds ``type``, and that is asked of every scope by
    name (``calls._is_builtin_type``), the module's too, whatever the function binds."""
    import ast

    from gradguard.inference.scopes import bound_names, free_names

    fn = ast.parse("def f(m):\n    t = type(m)\n    type = None\n    n = 1\n    return t\n").body[0]
    assert {"type", "n", "t", "m"} <= bound_names(fn)
    assert "type" in free_names(fn) and not {"n", "t", "m"} & free_names(fn)


# A function's cache entry is checked against what its run read (engine._Reads): the module names it looked up,
# and of those the file's functions it ran.
NAMED_NOT_RUN = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from builders import build_model


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return torch.relu_(self.fc(x))


    def filter_state(state):
        w = state["w"]
        w.mul_(2)
        return state


    def create(variant, **kwargs):
        return build_model(Net, variant, filter_fn=filter_state, **kwargs)


    def small():
        return create("small", depth=2)


    def large():
        return create("large", depth=8)
''')


def test_a_helper_only_handed_on_is_not_read_so_editing_it_reanalyses_it_alone(runs):
    """``create`` names ``filter_state`` but only hands it to an imported builder: no run looks into its body, so
    editing that body (a keystroke, a line added) re-analyses ``filter_state`` alone, not ``create`` nor the
    functions that call ``create`` (timm's ``checkpoint_filter_fn``, named by ``_create_vision_transformer``)."""
    cache: dict = {}
    analyze_source(NAMED_NOT_RUN, "m.py", cache=cache, fixes=False)
    assert {"create", "small", "large", "filter_state"} <= set(runs)
    for edited in (NAMED_NOT_RUN.replace("w.mul_(2)", "w.mul_(3)"),
                   NAMED_NOT_RUN.replace("    w.mul_(2)\n", "    w.mul_(2)\n    w.add_(1)\n")):
        runs.clear()
        result = analyze_source(edited, "m.py", cache=cache, fixes=False)
        assert runs == ["filter_state"]
        assert _findings(result) == _findings(analyze_source(edited, "m.py", fixes=False))
        analyze_source(NAMED_NOT_RUN, "m.py", cache=cache, fixes=False)


RUN_THROUGH_ANOTHER = textwrap.dedent('''
    import torch


    def scale(t):
        return t * 2


    def apply(fn, x):
        return fn(x)


    def train():
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        z = apply(scale, y)
        z.sum().backward()
''')


def test_a_helper_run_through_another_function_is_read_by_the_caller_that_names_it():
    """``train`` only names ``scale``; ``apply`` runs it, inside ``train``'s run: its body is read, and a write
    added there (``t.mul_(2)`` on the sigmoid's saved output) is ``train``'s finding after the edit too."""
    edited = RUN_THROUGH_ANOTHER.replace("return t * 2", "return t.mul_(2)")
    for before, after in ((RUN_THROUGH_ANOTHER, edited), (edited, RUN_THROUGH_ANOTHER)):
        fresh = _cached_equals_fresh(before, after)
        assert any(code == "GG001" for _, code, _ in fresh) == (after is edited)


SHADOWED_IMPORT = textwrap.dedent('''
    import torch
    from torch.nn.functional import relu


    def train():
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        z = relu(y)
        z.sum().backward()
''')


def test_a_function_of_the_file_defined_later_answers_a_name_the_run_found_among_the_imports():
    """``relu`` was the import; a ``def relu`` added at the end of the file answers it instead (the file's
    functions are looked up before the imports), and its write of the sigmoid's output is ``train``'s finding."""
    edited = SHADOWED_IMPORT + "\n\ndef relu(t):\n    return t.mul_(2)\n"
    for before, after in ((SHADOWED_IMPORT, edited), (edited, SHADOWED_IMPORT)):
        fresh = _cached_equals_fresh(before, after)
        assert any(code == "GG001" for _, code, _ in fresh) == (after is edited)


CONTEXT_MANAGER = textwrap.dedent('''
    import contextlib

    import torch


    @contextlib.contextmanager
    def doubled(t):
        u = t * 2
        yield u


    def train():
        x = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(x)
        with doubled(y) as z:
            z.sum().backward()
''')


def test_a_context_manager_run_in_two_parts_made_from_it_is_read_by_the_function_that_enters_it():
    """``with doubled(y)`` runs two functions made from ``doubled``'s body (before and after its ``yield``), not
    ``doubled`` itself: its body is read all the same, and a write added there is ``train``'s finding."""
    edited = CONTEXT_MANAGER.replace("u = t * 2", "u = t.mul_(2)")
    for before, after in ((CONTEXT_MANAGER, edited), (edited, CONTEXT_MANAGER)):
        fresh = _cached_equals_fresh(before, after)
        assert any(code == "GG001" for _, code, _ in fresh) == (after is edited)


CHANGED_AT_TOP_LEVEL = textwrap.dedent('''
    import torch

    t = torch.zeros(3)
    t.requires_grad_(True)


    def f():
        t.add_(1)
        return t
''')


def test_a_module_variable_is_also_what_the_top_level_does_to_it_without_binding_it():
    """``t.requires_grad_(True)`` binds nothing, but ``f`` reads the ``t`` it leaves: editing it (to ``False``: no
    leaf that requires grad written in place any more) changes ``f``'s finding."""
    edited = CHANGED_AT_TOP_LEVEL.replace("t.requires_grad_(True)", "t.requires_grad_(False)")
    for before, after in ((CHANGED_AT_TOP_LEVEL, edited), (edited, CHANGED_AT_TOP_LEVEL)):
        fresh = _cached_equals_fresh(before, after)
        assert bool(fresh) == (after is CHANGED_AT_TOP_LEVEL)


BOUND_IN_BLOCKS = textwrap.dedent('''
    import torch

    scale = 2.0
    with torch.no_grad():
        w = torch.zeros(3, requires_grad=True)
    for _ in range(2):
        u = torch.zeros(3, requires_grad=True)
    print(v := torch.zeros(3, requires_grad=True))


    def link():
        global alias
        alias = torch.zeros(3)


    link()
    alias.requires_grad_(True)


    def f():
        w.mul_(scale)
        u.mul_(scale)
        v.mul_(scale)
        alias.mul_(scale)
''')


@pytest.mark.parametrize("edited", ["with", "for", "walrus", "global"])
def test_a_module_variable_bound_in_a_block_a_walrus_or_by_a_global_declaration_is_read_by_the_functions_naming_it(
        edited):
    """``f`` reads ``w`` bound in a ``with`` body, ``u`` in a ``for`` body, ``v`` by a walrus and ``alias`` by a
    function that declares it ``global`` (then run at the top level): editing the statement that makes each one
    a leaf that requires grad changes ``f``'s finding on its write."""
    statement = {"with": "w = torch.zeros(3, requires_grad=True)", "for": "u = torch.zeros(3, requires_grad=True)",
                 "walrus": "v := torch.zeros(3, requires_grad=True)", "global": "alias.requires_grad_(True)"}[edited]
    after = BOUND_IN_BLOCKS.replace(statement, statement.replace("True", "False"))
    name = statement.split()[0].split(".")[0]
    for before, text in ((BOUND_IN_BLOCKS, after), (after, BOUND_IN_BLOCKS)):
        fresh = _cached_equals_fresh(before, text)
        assert any(f"{name}.mul_" in text.split("\n")[line - 1] for line, _, _ in fresh) == (text is BOUND_IN_BLOCKS)


TOP_LEVEL_SHAPES = textwrap.dedent('''
    import torch


    class Arm:
        def __init__(self, x):
            self.x = x

        def on(self):
            self.x.requires_grad_(True)


    def link():
        global alias
        alias = w


    def make():
        return torch.zeros(3)


    scale = 2.0
    w = make()
    with torch.no_grad():
        v = torch.ones(3)
    arm = Arm(v)
    print(z := torch.zeros(3))
    pass
    pass
    pass


    def f():
        w.mul_(scale)
        return w


    def g():
        y = torch.exp(v * scale)
        z.add_(y.sum())
        return y
''')
# statements an edit puts in place of a ``pass`` (or takes out again), and variants of the lines above
_TOP_LEVEL_EDITS = ["arm.on()", "link()", "alias.requires_grad_(True)", "w.requires_grad_(True)",
                    "z.requires_grad_(True)", "v.requires_grad_(True)", "pass", "pass"]
_TOP_LEVEL_VARIANTS = {"return torch.zeros(3)": "return torch.zeros(3, requires_grad=True)",
                       "v = torch.ones(3)": "v = torch.ones(3, requires_grad=True)",
                       "alias = w": "alias = v", "scale = 2.0": "scale = 2"}


def test_random_edits_of_the_module_top_level_match_a_fresh_analysis():
    """What a function reads of the module's variables is every statement that can bind or change them, however
    it does (a method of another variable's object, a ``global`` declaration, a ``with`` body, a walrus):
    edit after edit, the cached findings equal a fresh analysis's."""
    import random

    rng = random.Random(5)
    text = TOP_LEVEL_SHAPES
    cache: dict = {}
    analyze_source(text, "n.py", cache=cache, fixes=False)
    seen = set()
    for _ in range(40):
        lines = text.split("\n")
        if rng.random() < 0.7:
            slots = [i for i, line in enumerate(lines) if line.split("(")[0] in {e.split("(")[0] for e in _TOP_LEVEL_EDITS}
                     and not line.startswith(" ")]
            lines[rng.choice(slots)] = rng.choice(_TOP_LEVEL_EDITS)
        else:
            old, new = rng.choice(list(_TOP_LEVEL_VARIANTS.items()))
            lines = [line.replace(old, new) if old in line else line.replace(new, old) for line in lines]
        text = "\n".join(lines)
        cached = _findings(analyze_source(text, "n.py", cache=cache, fixes=False))
        assert cached == _findings(analyze_source(text, "n.py", fixes=False)), text
        seen.add(tuple(line for line, _, _ in cached))
    assert len(seen) >= 3  # the edits did change the findings
