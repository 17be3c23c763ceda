"""``--format json``: ``{"version": 1, "diagnostics": [...]}``.

Other tools parse this, so its shape is exactly ``Diagnostic.to_json`` under a
version number; a change that breaks readers needs a new version.

With ``check --probe`` a ``"probe"`` key is added: ``{"files": [...], "complete": bool}``, one entry per file
asked for (``probe.model.FileOutcome.to_json``: ``path``, ``outcome`` -- ``ran``, ``stopped-by-finding``,
``stopped``, ``timed-out``, ``did-not-run``, ``no-entry``, ``not-run`` --, ``detail``, ``how``, ``line``,
``status``, ``seconds``, ``complete``); ``complete`` is true when every file ran to its end or has no entry
point.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..diagnostics import Diagnostic
from . import RuleInfo

VERSION = 1


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    return json.dumps({"version": VERSION, "diagnostics": [d.to_json() for d in diagnostics]}, indent=2) + "\n"


def render_runs(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo], runs) -> str:
    files = [run.to_json() for run in runs]
    probe = {"files": files, "complete": all(f["complete"] for f in files),
             "counts": {o: sum(1 for f in files if f["outcome"] == o) for o in sorted({f["outcome"] for f in files})}}
    return json.dumps({"version": VERSION, "diagnostics": [d.to_json() for d in diagnostics], "probe": probe},
                      indent=2) + "\n"
