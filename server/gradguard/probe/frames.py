"""Which frames are the user's code, and where in it they are.  Imports torch (to leave its files out)."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from .model import Site


class UserCode:
    """Decides, once per code object, whether a frame runs the user's code.

    The user's code is every file under one of ``roots`` (default: the target's folder), except
    installed packages and gradguard itself.
    """

    def __init__(self, roots: list[str]):
        self.roots = tuple(os.path.join(os.path.realpath(r), "") for r in roots)
        excluded = {os.path.join(os.path.realpath(os.path.dirname(os.path.dirname(__file__))), "")}
        for p in sys.path:
            if p.endswith(("site-packages", "dist-packages")):
                excluded.add(os.path.join(os.path.realpath(p), ""))
        excluded.add(os.path.join(os.path.realpath(os.path.dirname(torch.__file__)), ""))
        self.excluded = tuple(excluded)
        self._codes: dict[Any, bool] = {}
        self._files: dict[str, bool] = {}

    def is_user_file(self, filename: str) -> bool:
        known = self._files.get(filename)
        if known is None:
            if not filename or filename.startswith("<"):
                known = False
            else:
                real = os.path.realpath(filename)
                known = real.startswith(self.roots) and not real.startswith(self.excluded)
            self._files[filename] = known
        return known

    def is_user(self, code) -> bool:
        known = self._codes.get(code)
        if known is None:
            known = self._codes[code] = self.is_user_file(code.co_filename)
        return known


_POSITIONS: dict[Any, list] = {}


def code_site(code, line: int | None, lasti: int) -> Site:
    """The user's line, with the column range of the instruction when Python knows it (3.11+)."""
    line = line or code.co_firstlineno
    try:
        positions = _POSITIONS.get(code)
        if positions is None:
            positions = _POSITIONS[code] = list(code.co_positions())
        start, end, col, end_col = positions[lasti // 2]
        if start == line and col is not None and end_col is not None:
            return Site(code.co_filename, line, col + 1, end or line, end_col + 1)
    except (AttributeError, IndexError, ValueError, TypeError):
        pass
    return Site(code.co_filename, line)


def frame_sites(frame, user: UserCode, limit: int = 8) -> tuple[list[Site], list]:
    """The user's frames from ``frame`` outwards (innermost first), and the library frames between
    ``frame`` and the innermost user frame (``torch/optim/adam.py``...).  Do not keep the frames."""
    sites: list[Site] = []
    inner: list = []
    while frame is not None and len(sites) < limit:
        code = frame.f_code
        if user.is_user(code):
            sites.append(code_site(code, frame.f_lineno, frame.f_lasti))
        elif not sites:
            inner.append(frame)
        frame = frame.f_back
    return sites, inner


def traceback_sites(tb, user: UserCode, limit: int = 8) -> list[Site]:
    """The user's frames of a traceback, innermost first."""
    sites = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if user.is_user(code):
            sites.append(code_site(code, tb.tb_lineno, tb.tb_lasti))
        tb = tb.tb_next
    sites.reverse()
    return sites[:limit]


def user_frame(frame, user: UserCode):
    """The first frame of the user's code from ``frame`` outwards, or None.  Do not keep it."""
    while frame is not None and not user.is_user(frame.f_code):
        frame = frame.f_back
    return frame


def frame_site(frame) -> Site:
    return code_site(frame.f_code, frame.f_lineno, frame.f_lasti)


def skip_dynamo(function) -> None:
    """Let ``torch.compile`` run ``function`` and whatever it calls as plain Python, never trace it.

    A dispatch mode's ``__torch_dispatch__`` runs inside compiled code; Dynamo would otherwise compile it (once per
    aten op until its recompile limit: a compiled model's step then took 30 s instead of 5).  Marked per code object
    in torch's C extension, so no wrapper costs anything per op (``_should_skip_dynamo`` would add ~10 us each) and
    ``torch._dynamo`` (1.4 s to import) is not imported for it.
    """
    from_c = getattr(torch._C, "_dynamo", None)
    frames = getattr(from_c, "eval_frame", None)
    if frames is None or not hasattr(frames, "set_code_exec_strategy"):
        return
    skip = frames._FrameAction.SKIP
    frames.set_code_exec_strategy(function.__code__, frames._FrameExecStrategy(skip, skip))
