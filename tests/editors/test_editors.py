"""Real editors against `gradguard lsp`: Neovim 0.7 and 0.11 (built-in client) and Emacs + eglot, headless.

Each run opens a Python file in a fresh directory, waits for gradguard's findings, applies a quick fix the
way a user does (the code-action menu), saves, and reports in JSON what it saw.  The test then checks:
- the editor is configured by the README's own snippet for it (``readme_snippet``: the docs cannot drift), whose
  settings (``ignore = GG005``) reach the server: the "settings" scenario has a GG005 finding that must not show;
- the editor showed exactly the findings ``api.analyze_source`` gives with those settings, at the right columns
  (bytes in Neovim, whatever encoding was negotiated; characters in Emacs);
- the menu offered "Suppress CODE on this line"; the action applied was the first quickfix not titled
  "Suppress ..." when there is one (a real fix, then checked against the fix's own edits), else the
  suppression;
- the file on disk is the original with exactly that edit, and the editor's findings after saving are
  ``api.analyze_source`` of the file on disk.
Clients are found by tests/editors/conftest.py (a missing one skips, or fails under CI=true).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradguard.api import analyze_source
from gradguard.config import Config
from gradguard.text import apply_edits

from editors.clients import Client, emacs, nvim_011, nvim_07, require

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
README = HERE.parents[1] / "README.md"
SNIPPET_PAGES = (README, HERE.parents[1] / "docs" / "editors.md")  # README: Neovim 0.11, eglot; docs: Neovim 0.7
README_SETTINGS = Config(ignore=("GG005",))  # what every README snippet's settings say
TIMEOUT = 120  # seconds for a whole editor run; each step inside waits at most 20 s

_EXPECT_COMMENT = re.compile(r"\s*#\s*expect(-raise|-silent)?:?.*$")


def _corpus_text() -> str:
    """A fixture with two findings (GG001 twice, with related locations), without its test markers."""
    text = (FIXTURES / "GG001" / "pos_prenorm_two_sublayers.py").read_text(encoding="utf-8")
    return "".join(_EXPECT_COMMENT.sub("", line.rstrip("\n")) + "\n" for line in text.splitlines())


UNICODE_TEXT = '''import torch


def schritt(größe):
    ψ = torch.zeros(größe, requires_grad=True)
    etikett = "😀 ψ"; ψ += 1
    return ψ, etikett
'''

# A GG005 (the ReLU overwrites the sigmoid's saved output: backward raises) that the README's settings
# ignore, and a GG002 (an in-place write to a leaf: torch raises at once) to act on.
SETTINGS_TEXT = '''import torch
import torch.nn.functional as F


def gate(x):
    h = torch.sigmoid(x)
    return F.relu(h, inplace=True)


def step():
    x = torch.randn(4, requires_grad=True)
    gate(x).sum().backward()
    w = torch.zeros(3, requires_grad=True)
    w += 1
    return w
'''

SCENARIOS = {
    # name: (text, 1-based line of the finding to act on)
    "corpus": (_corpus_text(), 17),
    "unicode": (UNICODE_TEXT, 6),  # an astral char and non-ASCII names before the finding on its line
    "settings": (SETTINGS_TEXT, 14),
}


def readme_snippet(name: str) -> str:
    """The fenced block after ``<!-- tests/editors: NAME -->`` in README.md or docs/editors.md (exactly one)."""
    pattern = rf"<!-- tests/editors: {re.escape(name)} -->\n```\w+\n(.*?)\n```"
    found = [m.group(1) for page in SNIPPET_PAGES for m in re.finditer(pattern, page.read_text(encoding="utf-8"), re.S)]
    assert len(found) == 1, f"{len(found)} snippets marked tests/editors: {name} in README.md and docs/editors.md"
    return found[0] + "\n"


def configured(name: str, readme_cmd: str, cmd: str, folder: Path) -> Path:
    """The README's snippet ``name`` as a file, running the test's server instead of ``gradguard lsp``."""
    snippet = readme_snippet(name)
    assert snippet.count(readme_cmd) == 1, f"the {name} snippet should run {readme_cmd} once"
    assert '"GG005"' in snippet  # README_SETTINGS
    path = folder / f"readme-{name}.{'el' if name == 'eglot' else 'lua'}"
    path.write_text(snippet.replace(readme_cmd, cmd), encoding="utf-8")
    return path


def server_command() -> list[str]:
    script = Path(sys.executable).with_name("gradguard")
    if script.exists():
        return [str(script), "lsp"]  # what a user configures
    return [sys.executable, "-m", "gradguard.lsp"]


def isolated_env(tmp_path: Path) -> dict[str, str]:
    """Editors write state, logs and temp files into the test's own directory, never into ~ or /tmp."""
    dirs = {name: tmp_path / "home" / name.lower() for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "TMPDIR")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return {**os.environ, **{k: str(v) for k, v in dirs.items()}, "HOME": str(tmp_path / "home")}


def run_editor(argv: list[str], env: dict[str, str], cwd: Path, report: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    data = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    detail = f"rc={proc.returncode} in {elapsed:.1f}s\nSTDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-4000:]}\nREPORT: {data}"
    assert proc.returncode == 0 and data.get("ok") is True, detail
    data["elapsed"] = elapsed
    return data


def setup_project(tmp_path: Path, text: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n', encoding="utf-8")
    path = project / "model.py"
    path.write_bytes(text.encode("utf-8"))
    return path


def expected_after(text: str, line: int, code: str, chosen: str) -> str:
    """The file after applying ``chosen`` to the finding ``code`` on ``line``."""
    if chosen == f"Suppress {code} on this line":
        lines = text.split("\n")
        lines[line - 1] = lines[line - 1].rstrip() + f"  # gradguard: ignore[{code}]"
        return "\n".join(lines)
    (diag,) = [d for d in analyze_source(text).diagnostics if d.line == line and d.code == code]
    assert diag.fix is not None and diag.fix.title == chosen
    return apply_edits(text, diag.to_json()["fix"]["edits"])


def findings(text: str) -> list[tuple[int, str]]:
    return sorted((d.line, d.code) for d in analyze_source(text, config=README_SETTINGS).diagnostics)


def check_common(report: dict, text: str, path: Path, line: int) -> tuple[str, str]:
    """The checks every editor shares; returns (code, on-disk text)."""
    code = report["target"]["code"]
    titles = [m["title"] if isinstance(m, dict) else m for m in report["menu"]]
    assert f"Suppress {code} on this line" in titles
    fixes = [t for t in titles if not t.startswith(("Suppress", "Fix all gradguard issues"))]
    chosen = report["chosen"]
    if fixes:  # quick fixes have landed: the real fix is preferred over the suppression
        assert chosen == fixes[0], titles
    else:
        assert chosen == f"Suppress {code} on this line"
    on_disk = path.read_bytes().decode("utf-8")
    assert on_disk == expected_after(text, line, code, chosen)
    assert report["modified"] is False
    return code, on_disk


NVIMS = {"nvim-0.7": nvim_07, "nvim-0.11": nvim_011}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("which", sorted(NVIMS))
def test_neovim(which: str, scenario: str, tmp_path: Path):
    client: Client = require(NVIMS[which]())
    text, line = SCENARIOS[scenario]
    path = setup_project(tmp_path, text)
    report_path = tmp_path / "report.json"
    lua_cmd = "{ " + ", ".join(json.dumps(part) for part in server_command()) + " }"
    env = {
        **isolated_env(tmp_path),
        "GG_CONFIG": str(configured(which, '{ "gradguard", "lsp" }', lua_cmd, tmp_path)),
        "GG_TARGET_LINE": str(line),
        "GG_REPORT": str(report_path),
    }
    argv = [client.binary, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {HERE / 'nvim_e2e.lua'}", str(path)]
    report = run_editor(argv, env, path.parent, report_path)
    assert report["nvim"] == client.version

    # the findings shown are the analyzer's, at the right byte columns for the negotiated encoding
    shown = sorted((d["lnum"] + 1, d["code"]) for d in report["diagnostics"] if d["source"] == "gradguard")
    assert shown == findings(text)
    (diag,) = [d for d in analyze_source(text).diagnostics if d.line == line]
    line_text = text.split("\n")[line - 1]
    target = report["target"]
    assert target["lnum"] == line - 1 and target["code"] == diag.code
    assert target["col"] == len(line_text[: diag.span.column - 1].encode("utf-8"))
    assert target["end_col"] == len(line_text[: diag.span.end_column - 1].encode("utf-8"))
    if client.version.startswith("0.11"):
        assert report["offset_encoding"] == "utf-8"  # 0.11 offers utf-8 first; the server takes it
        # 0.11 pulls (textDocument/diagnostic), so the server never pushes
        assert report["pushes"] == 0 and report["pulls"] and set(report["pulls"]) <= {"full", "unchanged"}, report
    else:
        assert report["offset_encoding"] == "utf-16"
        assert report["pushes"] > 0 and report["pulls"] == [], report  # 0.7 cannot pull: the server pushes
    # both announce codeAction.resolveSupport for "edit": the chosen quick fix's edit is made by
    # codeAction/resolve, not for every action listed
    assert report["requests"].count("codeAction/resolve") == 1, report["requests"]

    code, on_disk = check_common(report, text, path, line)
    after = sorted((d["lnum"] + 1, d["code"]) for d in report["diagnostics_after"] if d["source"] == "gradguard")
    assert after == findings(on_disk)
    assert (line, code) not in after
    print(f"\n[{which} {scenario}] {client.version}: {report['chosen']!r} in {report['elapsed']:.1f}s")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_emacs_eglot(scenario: str, tmp_path: Path):
    client = require(emacs())
    text, line = SCENARIOS[scenario]
    path = setup_project(tmp_path, text)
    report_path = tmp_path / "report.json"
    elisp_cmd = "(" + " ".join(json.dumps(part) for part in server_command()) + ")"
    env = {
        **isolated_env(tmp_path),
        "GG_CONFIG": str(configured("eglot", '("gradguard" "lsp")', elisp_cmd, tmp_path)),
        "GG_FILE": str(path),
        "GG_TARGET_LINE": str(line),
        "GG_REPORT": str(report_path),
    }
    argv = [client.binary, "--batch", "-Q", "-l", str(HERE / "eglot_e2e.el")]
    report = run_editor(argv, env, path.parent, report_path)
    assert report["emacs"] == client.version

    shown = sorted((d["line"], d["code"]) for d in report["diagnostics"])
    assert shown == findings(text)
    (diag,) = [d for d in analyze_source(text).diagnostics if d.line == line]
    (target,) = [d for d in report["diagnostics"] if d["line"] == line]
    assert (target["column"], target["end_column"]) == (diag.span.column - 1, diag.span.end_column - 1)
    expected_type = {"error": "eglot-error", "warning": "eglot-warning", "info": "eglot-note"}[diag.severity.value]
    assert report["target"]["type"] == expected_type

    code, on_disk = check_common(report, text, path, line)
    after = sorted((d["line"], d["code"]) for d in report["diagnostics_after"] or [])
    assert after == findings(on_disk)
    assert (line, code) not in after
    print(f"\n[emacs {scenario}] {client.version} eglot {report['eglot']}: {report['chosen']!r} in {report['elapsed']:.1f}s")
