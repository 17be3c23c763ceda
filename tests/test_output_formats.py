"""The machine formats other tools parse: JSON v1, SARIF 2.1.0, GitHub workflow commands; and text."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import jsonschema
import pytest

from gradguard.cli import main
from gradguard.diagnostics import Diagnostic, Related, Severity, Span
from gradguard.output import catalog, github, render

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"
SYNTAX_ERROR = "import torch\nx = torch.zeros(3)\nx += 1\ndef f(:\n"
SARIF_SCHEMA = Path(__import__("gradguard.output", fromlist=["x"]).__file__).with_name("sarif-2.1.0.schema.json")

_POSITION = {"type": "integer", "minimum": 1}
JSON_V1_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "diagnostics"],
    "properties": {
        "version": {"const": 1},
        "diagnostics": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["path", "line", "column", "end_line", "end_column", "code", "severity", "message",
                             "related", "fix"],
                "properties": {
                    "path": {"type": "string", "minLength": 1},
                    "cell": _POSITION,  # notebooks only: the 1-based cell the positions are in
                    "line": _POSITION,
                    "column": _POSITION,
                    "end_line": _POSITION,
                    "end_column": _POSITION,
                    "code": {"type": "string", "pattern": "^GG[0-9]{3}$"},
                    "severity": {"enum": ["error", "warning", "info"]},
                    "message": {"type": "string", "minLength": 1},
                    "related": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["path", "line", "column", "message"],
                            "properties": {
                                "path": {"type": "string"},
                                "cell": _POSITION,
                                "line": _POSITION,
                                "column": _POSITION,
                                "message": {"type": "string"},
                            },
                        },
                    },
                    "fix": {
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "required": ["title", "safe", "edits"],
                                "properties": {
                                    "title": {"type": "string"},
                                    "safe": {"type": "boolean"},
                                    "edits": {"type": "array"},
                                },
                            },
                        ]
                    },
                },
            },
        },
    },
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(LEAF_BUG)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "broken.py").write_text(SYNTAX_ERROR)
    (tmp_path / "pkg" / "ok.py").write_text("import torch\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(capsys, *argv: str) -> tuple[int, str]:
    code = main(["check", *argv])
    return code, capsys.readouterr().out


def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def hand_made() -> list[Diagnostic]:
    """Diagnostics exercising every field and every severity, independent of the engine."""
    return [
        Diagnostic(
            "dir with space/a,b:c%.py", Span(3, 5, 4, 9), "GG001", Severity.ERROR, "50% done,\nnext: line\r",
            related=(Related("dir with space/a,b:c%.py", 2, 1, "saved here"), Related("other.py", 9, 3, "used")),
        ),
        Diagnostic("b.py", Span(1, 1, 1, 1), "GG005", Severity.WARNING, "maybe"),
        Diagnostic("c.py", Span(7, 2, 7, 4), "GG002", Severity.INFO, "note this"),
    ]


# --- JSON --------------------------------------------------------------------


def test_json_matches_version_1_schema(project, capsys):
    code, out = check(capsys, "--format", "json")
    assert code == 1
    data = json.loads(out)
    jsonschema.validate(data, JSON_V1_SCHEMA)
    by_code = {d["code"]: d for d in data["diagnostics"]}
    assert set(by_code) == {"GG002", "GG900"}
    assert (by_code["GG002"]["path"], by_code["GG002"]["line"], by_code["GG002"]["column"]) == ("train.py", 3, 1)
    assert (by_code["GG900"]["path"], by_code["GG900"]["line"]) == ("pkg/broken.py", 4)
    assert [d["path"] for d in data["diagnostics"]] == sorted(d["path"] for d in data["diagnostics"])


def test_json_is_exactly_to_json(capsys):
    diags = hand_made()
    data = json.loads(render("json", diags, []))
    jsonschema.validate(data, JSON_V1_SCHEMA)
    assert data == {"version": 1, "diagnostics": [d.to_json() for d in diags]}


def test_json_without_findings(project, capsys):
    code, out = check(capsys, "--format", "json", "pkg/ok.py")
    assert code == 0
    assert json.loads(out) == {"version": 1, "diagnostics": []}


# --- SARIF -------------------------------------------------------------------


URL = re.compile(r"(?:https?|file)://[^\s\"')\]]+")


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_every_link_in_the_output_opens(project, capsys, fmt):
    """No made-up web address: a link is a shipped page on disk, or the schema's own address."""
    code, out = check(capsys, "--format", fmt)
    assert code == 1
    for url in URL.findall(out):
        if url.startswith("file:"):
            assert Path(url2pathname(urlsplit(url).path)).exists(), url  # a page, or SARIF's %SRCROOT%
        else:
            assert url == "https://json.schemastore.org/sarif-2.1.0.json", url


def test_sarif_links_to_the_configured_docs(project, capsys):
    (project / "pyproject.toml").write_text('[tool.gradguard]\ndocs-url = "https://docs.example.org/gg/rules/"\n')
    code, out = check(capsys, "--format", "sarif")
    assert code == 1
    sarif_validator().validate(log := json.loads(out))
    from gradguard.rules import ALL_RULES

    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    for rule in ALL_RULES:
        assert rules[rule.code]["helpUri"] == f"https://docs.example.org/gg/rules/{rule.code}.md"
    assert "helpUri" not in rules["GG900"]  # an input problem has no page


def test_a_docs_url_that_is_not_a_url_is_a_config_error(project, capsys):
    (project / "pyproject.toml").write_text('[tool.gradguard]\ndocs-url = "docs/rules"\n')
    assert main(["check", "."]) == 2
    assert "docs-url must be a URL" in capsys.readouterr().err


def test_vendored_schema_is_the_official_one():
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"


def test_sarif_from_cli_is_valid(project, capsys):
    code, out = check(capsys, "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    sarif_validator().validate(log)
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gradguard" and driver["version"]
    rules = {r["id"]: r for r in driver["rules"]}
    from gradguard.rules import ALL_RULES

    for rule in ALL_RULES:
        descriptor = rules[rule.code]
        assert descriptor["name"] == rule.name
        assert "helpUri" not in descriptor  # no web address configured: a file: link would be dead elsewhere
        assert descriptor["help"]["markdown"] == rule.docs()
        assert descriptor["shortDescription"]["text"] == rule.summary
    results = {r["ruleId"]: r for r in run["results"]}
    leaf = results["GG002"]
    location = leaf["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.py"
    assert location["region"]["startLine"] == 3 and location["region"]["startColumn"] == 1
    assert driver["rules"][leaf["ruleIndex"]]["id"] == "GG002"
    assert results["GG900"]["level"] == "error"
    assert results["GG900"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "pkg/broken.py"


def test_sarif_hand_made_fields():
    rules = catalog()
    log = json.loads(render("sarif", hand_made(), rules))
    sarif_validator().validate(log)
    results = log["runs"][0]["results"]
    assert [r["level"] for r in results] == ["error", "warning", "note"]
    first = results[0]
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "dir%20with%20space/a%2Cb%3Ac%25.py"
    assert first["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 3, "startColumn": 5, "endLine": 4, "endColumn": 9
    }
    related = first["relatedLocations"]
    assert [r["message"]["text"] for r in related] == ["saved here", "used"]
    assert related[1]["physicalLocation"]["region"] == {"startLine": 9, "startColumn": 3}


def test_sarif_absolute_path_and_no_findings(tmp_path):
    outside = Diagnostic(str(tmp_path / "x.py"), Span(1, 1, 1, 2), "GG900", Severity.ERROR, "bad")
    log = json.loads(render("sarif", [outside], catalog()))
    sarif_validator().validate(log)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == (tmp_path / "x.py").as_uri()
    empty = json.loads(render("sarif", [], catalog()))
    sarif_validator().validate(empty)
    assert empty["runs"][0]["results"] == []


def test_sarif_schema_catches_a_broken_log():
    """Guard against a validator that accepts anything."""
    log = json.loads(render("sarif", hand_made(), catalog()))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        sarif_validator().validate(log)


# --- text --------------------------------------------------------------------


def test_text_lines(project, capsys):
    code, out = check(capsys)
    finding = re.compile(r"^[^\s:][^:]*:\d+:\d+: GG\d{3} \S.*$")
    note = re.compile(r"^    [^:]+:\d+:\d+: note: .+$")
    lines = out.splitlines()
    assert lines and all(finding.match(line) or note.match(line) for line in lines)
    assert lines[0].startswith("pkg/broken.py:4:")
    assert any(line.startswith("train.py:3:1: GG002 ") for line in lines)


def test_text_related_notes_one_line_each():
    out = render("text", hand_made()[:1], [])
    assert out.splitlines() == [
        "dir with space/a,b:c%.py:3:5: GG001 50% done, next: line",
        "    dir with space/a,b:c%.py:2:1: note: saved here",
        "    other.py:9:3: note: used",
    ]


# --- GitHub ------------------------------------------------------------------


def test_github_escapes():
    assert github.escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert github.escape_property("a,b:c%d\n") == "a%2Cb%3Ac%25d%0A"
    first, second, third = render("github", hand_made(), []).splitlines()
    assert first == (
        "::error file=dir with space/a%2Cb%3Ac%25.py,line=3,col=5,endLine=4,endColumn=9,title=GG001"
        "::50%25 done,%0Anext: line%0D"
        "%0Adir with space/a,b:c%25.py:2:1: note: saved here%0Aother.py:9:3: note: used"
    )
    assert second.startswith("::warning file=b.py,line=1,col=1,")
    assert third.startswith("::notice file=c.py,line=7,col=2,endLine=7,endColumn=4,title=GG002::note this")


def test_github_from_cli(project, capsys):
    code, out = check(capsys, "--format", "github")
    assert code == 1
    command = re.compile(r"^::(error|warning|notice) file=[^,]+,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,title=GG\d{3}::.+$")
    lines = out.splitlines()
    assert len(lines) == 2 and all(command.match(line) for line in lines)
    assert lines[1].startswith("::error file=train.py,line=3,col=1,")


def test_every_format_goes_to_output_file(project, capsys):
    for fmt in ("text", "json", "sarif", "github"):
        code, out = check(capsys, "--format", fmt, "--output-file", f"report.{fmt}")
        assert code == 1 and out == ""
        assert (project / f"report.{fmt}").read_text(encoding="utf-8").strip()
