"""``--format sarif``: SARIF 2.1.0, for GitHub code scanning and other SARIF viewers.

One run; the driver lists every rule (with its full docs as help) so a viewer
can explain a finding without reaching us.  A SARIF log is usually read on another machine (code
scanning), so ``helpUri`` is given only for a web address (``docs-url``), never for the ``file:`` link to
the pages of this install.  URIs are relative to the working
directory, declared as ``%SRCROOT%``; columns are Unicode code points, as ours are.

With ``check --probe``, the run's ``invocations[0]`` says how the probe's run of each file ended: one
``toolExecutionNotifications`` entry per file (descriptor id ``probe/<outcome>``, the file and, when it
stopped at one, the line; ``properties`` holds ``probe.model.FileOutcome.to_json``), and
``executionSuccessful`` is false when a file asked for did not run to its end.

Notebook findings: the region's lines and columns are in the cell, ``properties.cell`` (1-based, counting
every cell) and a logical location ``cell N`` say which cell, and the message starts with ``cell N:``.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any, Sequence
from urllib.parse import quote

from .. import __version__
from ..diagnostics import Diagnostic, Severity
from ..doc_links import is_local
from . import RuleInfo

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
SRCROOT = "%SRCROOT%"


def _artifact(path: str) -> dict[str, Any]:
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(PurePosixPath(path.replace("\\", "/")).as_posix()), "uriBaseId": SRCROOT}


def _descriptor(rule: RuleInfo) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.explanation or rule.summary},
        "defaultConfiguration": {"level": LEVELS[rule.default_severity]},
    }
    if rule.url and not is_local(rule.url):
        descriptor["helpUri"] = rule.url
    if rule.docs:
        descriptor["help"] = {"text": rule.docs, "markdown": rule.docs}
    return descriptor


def _result(d: Diagnostic, rule_index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": LEVELS[d.severity],
        "message": {"text": d.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(d.path),
                    "region": {
                        "startLine": d.span.line,
                        "startColumn": d.span.column,
                        "endLine": d.span.end_line,
                        "endColumn": d.span.end_column,
                    },
                }
            }
        ],
    }
    if d.cell is not None:
        # SARIF has no cells: the region is in the cell's own lines, the cell is a logical location and a
        # property, and the message names it so that any viewer shows it.
        result["message"]["text"] = f"cell {d.cell}: {d.message}"
        result["locations"][0]["logicalLocations"] = [{"name": f"cell {d.cell}", "kind": "module"}]
        result["properties"] = {"cell": d.cell, "cellLine": d.span.line, "cellColumn": d.span.column}
    if d.code in rule_index:
        result["ruleIndex"] = rule_index[d.code]
    if d.related:
        result["relatedLocations"] = [
            {
                "id": i,
                "physicalLocation": {
                    "artifactLocation": _artifact(r.path),
                    "region": {"startLine": r.line, "startColumn": r.column},
                },
                "message": {"text": r.message if r.cell is None else f"cell {r.cell}: {r.message}"},
                **({"properties": {"cell": r.cell}} if r.cell is not None else {}),
            }
            for i, r in enumerate(d.related)
        ]
    return result


def sarif_log(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo]) -> dict[str, Any]:
    rule_index = {r.code: i for i, r in enumerate(rules)}
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gradguard",
                        "version": __version__,
                        "rules": [_descriptor(r) for r in rules],
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, rule_index) for d in diagnostics],
            }
        ],
    }


def render(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo]) -> str:
    return json.dumps(sarif_log(diagnostics, rules), indent=2) + "\n"


def _notification(run) -> dict[str, Any]:
    location: dict[str, Any] = {"artifactLocation": _artifact(run.path)}
    if run.line:
        location["region"] = {"startLine": run.line}
    return {
        "descriptor": {"id": f"probe/{run.outcome}"},
        "level": "note" if run.passes else "warning",
        "message": {"text": f"probe: {run.detail}"},
        "locations": [{"physicalLocation": location}],
        "properties": run.to_json(),
    }


def render_runs(diagnostics: Sequence[Diagnostic], rules: Sequence[RuleInfo], runs) -> str:
    log = sarif_log(diagnostics, rules)
    log["runs"][0]["invocations"] = [{
        "executionSuccessful": all(run.passes for run in runs),
        "toolExecutionNotifications": [_notification(run) for run in runs],
    }]
    return json.dumps(log, indent=2) + "\n"
