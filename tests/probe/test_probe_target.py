"""``target.instrument``: the marker call goes before the innermost statement holding each asked line, in
every kind of block (a ``case``, an ``except*``, a one-line ``if``), and the code still runs as written."""

from __future__ import annotations

import textwrap

from gradguard.probe.target import HIT, compile_target

SOURCE = textwrap.dedent("""\
    out = []
    try:
        raise ValueError
    except* ValueError:
        out.append(1)
    match len(out):
        case 1:
            out.append(2)
        case _:
            out.append(-1)
    for i in range(2):
        if i: out.append(3)
    else:
        out.append(4)
    """)


def test_each_asked_line_is_reported_once_per_run_of_its_statement() -> None:
    hits: list[int] = []
    namespace = {HIT: hits.append}
    exec(compile_target("t.py", SOURCE, {5, 8, 10, 12, 14}), namespace)
    assert namespace["out"] == [1, 2, 3, 4]
    assert hits == [5, 8, 12, 14]  # line 10 (the other case) never ran; line 12 ran once (i == 1)


def test_the_marker_goes_inside_a_one_line_if() -> None:
    code = compile_target("t.py", "for i in range(2):\n    if i: x = 1\n", {2})
    hits: list[int] = []
    exec(code, {HIT: hits.append})
    assert hits == [2]  # before ``x = 1``, not before the ``if`` (which runs twice)
