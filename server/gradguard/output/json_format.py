"""``--format json``: ``{"version": 1, "diagnostics": [...]}``.

Other tools parse this, so its shape is exactly ``Diagnostic.to_json`` under a
version number; a change that breaks readers needs a new version.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..diagnostics import Diagnostic
from . import RuleInfo

VERSION = 1


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo] = ()) -> str:
    return json.dumps({"version": VERSION, "diagnostics": [d.to_json() for d in diagnostics]}, indent=2) + "\n"
