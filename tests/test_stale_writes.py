"""No write from a stale read, and no result stored under the wrong bytes (issue 28, items 9-11).

``--fix`` fixes the bytes it analysed and writes only over those same bytes; the result cache stores a
result only under the key of the bytes it is the analysis of, writes entries atomically, and takes an entry
it cannot read back whole (empty, torn, the wrong shape) for a miss.  Each test here failed before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gradguard.batch
import gradguard.autofix.writer
from gradguard.cli import main
from gradguard.result_cache import ENV_DIR, ENV_OFF

# y += 1 on the result of exp (saved for its backward): GG001, fixed to ``y = y + 1``.
BUG = ("import torch\n\ndef f(w):\n    x = w * 2\n    y = torch.exp(x)\n    y += 1\n    return y.sum()\n\n"
       "w = torch.ones(3, requires_grad=True)\nf(w).backward()\n")
FIXED = BUG.replace("    y += 1\n", "    y = y + 1\n")
# The same bug two lines further down: the first version's fix, applied here, lands on the wrong line.
SHIFTED = "import torch\n# one\n# two\n" + BUG.split("\n", 1)[1]
SHIFTED_FIXED = SHIFTED.replace("    y += 1\n", "    y = y + 1\n")
CLEAN = "import torch\n\ndef f(w):\n    return torch.exp(w * 2).sum()\n"


@pytest.fixture
def gg(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()

    def run(*argv: str, cache: bool = False):
        if cache:
            monkeypatch.delenv(ENV_OFF, raising=False)
            monkeypatch.delenv(ENV_DIR, raising=False)
        else:
            monkeypatch.setenv(ENV_OFF, "1")
        code = main(["check", "--jobs", "1", "--no-progress", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _after_analysis(monkeypatch, action):
    """Run ``action()`` once, right after the CLI's analysis of the files and before it fixes them."""
    real = gradguard.batch.analyze_cached

    def hooked(*args, **kwargs):
        out = real(*args, **kwargs)
        action()
        return out

    monkeypatch.setattr(gradguard.batch, "analyze_cached", hooked)


def test_a_file_edited_after_the_analysis_is_fixed_as_it_is_now(gg, tmp_path, monkeypatch):
    """Before: the first read's fix (line 6) was applied to the new text (its line 6 is ``y = torch.exp``)."""
    target = tmp_path / "t.py"
    target.write_text(BUG)
    _after_analysis(monkeypatch, lambda: target.write_text(SHIFTED))
    code, out, err = gg("--fix", "t.py")
    assert target.read_text() == SHIFTED_FIXED, target.read_text()
    assert code == 0 and "no problems remain" in err, err


def test_a_file_edited_while_it_is_fixed_is_not_overwritten(gg, tmp_path, monkeypatch):
    """Before: the editor's save was lost under the fix of the earlier text, and the run said all was fixed."""
    target = tmp_path / "t.py"
    target.write_text(BUG)
    saved = BUG + "# saved by the editor meanwhile\n"
    real = gradguard.autofix.writer.fix_text

    def editor_saves_meanwhile(*args, **kwargs):
        outcome = real(*args, **kwargs)
        target.write_text(saved)
        return outcome

    monkeypatch.setattr(gradguard.autofix.writer, "fix_text", editor_saves_meanwhile)
    code, out, err = gg("--fix", "t.py")
    assert target.read_text() == saved
    assert code == 2
    assert "t.py: changed while fixing; not written" in err
    assert "no problems remain" not in err and "Traceback" not in err


def test_the_fixed_file_keeps_its_mode_and_a_symlink_stays_a_symlink(gg, tmp_path):
    real = tmp_path / "real.py"
    real.write_text(BUG)
    real.chmod(0o751)
    (tmp_path / "link.py").symlink_to("real.py")
    code, out, err = gg("--fix", "link.py")
    assert code == 0, err
    assert (tmp_path / "link.py").is_symlink() and real.read_text() == FIXED
    assert real.stat().st_mode & 0o777 == 0o751
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_file_edited_during_a_cached_run_is_not_cached_as_clean(gg, tmp_path, monkeypatch):
    """Before: the result of the clean text read by the analysis was stored under the key of the buggy text
    the cache had read, so every later run said "All checks passed." about the bug."""
    target = tmp_path / "t.py"
    target.write_text(BUG)
    real_read = Path.read_bytes
    reads = []

    def file_is_clean_for_a_moment(self):
        if self == target.resolve() or self == target or self.name == "t.py":
            reads.append(1)
            if len(reads) == 2:  # the cache read BUG; the next read sees CLEAN (edited, then undone)
                return CLEAN.encode()
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", file_is_clean_for_a_moment)
    gg("t.py", cache=True)
    code, out, err = gg("t.py", cache=True)
    assert code == 1 and "GG001" in out, (out, err)


def _entries(tmp_path: Path) -> list[Path]:
    cache = tmp_path / ".gradguard_cache"
    return [p for p in cache.rglob("*") if p.is_file() and p.parent != cache]


@pytest.mark.parametrize("body", [b"", b"[]", b'{"error": null}', b'{"error": null, "diagnostics": {}}',
                                  b'{"error": 3, "diagnostics": []}', b'{"error": null, "diagnostics": [1]}',
                                  b'{"error": null, "diagnostics": [{"code": 5}]}', b"\xff\xfe", b'{"error": nu'])
def test_an_entry_that_does_not_validate_is_a_miss_not_a_clean_result(gg, tmp_path, body):
    """Before: an empty entry (a crash after an unsynced rename leaves one) was read as "no findings", and
    some wrong shapes crashed with a traceback."""
    (tmp_path / "t.py").write_text(BUG)
    assert gg("t.py", cache=True)[0] == 1
    [entry] = _entries(tmp_path)
    entry.write_bytes(body)
    code, out, err = gg("t.py", cache=True)
    assert code == 1 and "GG001" in out and "Traceback" not in err


def test_an_entry_names_its_key_and_a_clean_entry_is_not_empty(gg, tmp_path):
    (tmp_path / "c.py").write_text(CLEAN)
    assert gg("c.py", cache=True)[0] == 0
    [entry] = _entries(tmp_path)
    stored = json.loads(entry.read_text())
    assert stored == {"key": entry.name, "error": None, "diagnostics": []}
    # An entry copied under another key (a file system that mixed up two renames) is a miss.
    (tmp_path / "t.py").write_text(BUG)
    gg("t.py", cache=True)
    [bug_entry] = [e for e in _entries(tmp_path) if e != entry]
    bug_entry.write_bytes(entry.read_bytes())
    assert gg("t.py", cache=True)[0] == 1


def test_two_concurrent_fix_runs_leave_a_whole_fixed_file(tmp_path):
    """Two real ``check --fix`` processes on the same 20 files: each file ends fixed once, never a mix."""
    names = [f"m{i}.py" for i in range(20)]
    for name in names:
        (tmp_path / name).write_text(BUG)
    cmd = [sys.executable, "-m", "gradguard", "check", "--fix", "--no-cache", "--jobs", "1", *names]
    runs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [r.communicate(timeout=120) for r in runs]
    assert all("Traceback" not in err for _, err in outs), outs
    assert all(r.returncode in (0, 2) for r in runs), outs
    for name in names:
        assert (tmp_path / name).read_text() == FIXED, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_workspace_mode_does_not_cache_a_result_under_other_bytes(tmp_path, monkeypatch):
    """The language server's closed files (workspace mode) share the CLI's cache: the same race, the same
    rule.  Before: the second survey served the clean result of a moment for the buggy file."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from gradguard.config import Config
    from gradguard.lsp import closed_files

    monkeypatch.delenv(ENV_OFF, raising=False)
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.setattr(closed_files, "ProcessPoolExecutor",
                        lambda *a, **k: (_ for _ in ()).throw(OSError(38, "no processes here")))
    project = tmp_path / "project"
    project.mkdir()
    target = project / "t.py"
    target.write_text(BUG)
    real_read = Path.read_bytes
    reads = []

    def file_is_clean_for_a_moment(self):
        if self.name == "t.py":
            reads.append(1)
            if len(reads) == 2:
                return CLEAN.encode()
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", file_is_clean_for_a_moment)

    def survey():
        found = closed_files.survey({project: Config()})
        with ThreadPoolExecutor(2) as threads:
            results, _ = asyncio.run(closed_files.analyse(closed_files.Pool(threads, 2), found, Config(), lambda n: None))
        return [d.code for r in results.values() for d in r.diagnostics]

    survey()
    assert survey() == ["GG001"]


def test_a_hard_linked_file_stays_linked_and_a_users_file_keeps_its_owner(gg, tmp_path):
    import os

    target = tmp_path / "t.py"
    target.write_text(BUG)
    os.link(target, tmp_path / "other_name.py")
    owned = tmp_path / "u.py"
    owned.write_text(BUG)
    if os.geteuid() == 0:
        os.chown(owned, 1234, 5678)
    code, out, err = gg("--fix", "t.py", "u.py")
    assert code == 0, err
    assert (tmp_path / "other_name.py").read_text() == FIXED == target.read_text()
    assert owned.read_text() == FIXED
    if os.geteuid() == 0:
        assert (owned.stat().st_uid, owned.stat().st_gid) == (1234, 5678)
