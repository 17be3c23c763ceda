"""Workspace mode's parts in process: which pyproject.toml configures a file of a workspace folder, and the
closed files' analysis when no worker process can start."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradguard.config import Config
from gradguard.lsp import closed_files
from gradguard.lsp.folders import folder_of, pyproject_in

LEAF = "import torch\nw = torch.zeros(3, requires_grad=True)\nw += 1\n"  # raises at `w += 1` (test_workspace_lsp)


def test_the_nearest_pyproject_up_to_the_folder_else_the_one_the_folder_inherits(tmp_path):
    for name in ["pyproject.toml", "ws/sub/pyproject.toml"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("[tool.gradguard]\n")
    folder = tmp_path / "ws"
    assert pyproject_in(folder / "sub" / "deeper" / "x.py", folder) == (tmp_path / "ws/sub/pyproject.toml").resolve()
    assert pyproject_in(folder / "other" / "x.py", folder) == (tmp_path / "pyproject.toml").resolve()
    assert folder_of(folder / "sub" / "x.py", [tmp_path, folder, tmp_path / "elsewhere"]) == folder
    assert folder_of(tmp_path / "x.py", [folder]) is None


def test_closed_files_are_analysed_in_threads_when_no_process_can_start(tmp_path, monkeypatch):
    def no_processes(*args, **kwargs):
        raise OSError(38, "Function not implemented")  # e.g. no /dev/shm semaphores in a sandbox

    monkeypatch.setattr(closed_files, "ProcessPoolExecutor", no_processes)
    for i in range(10):
        (tmp_path / f"m{i}.py").write_text(LEAF)
    found = closed_files.survey({tmp_path: Config()})
    done: list[int] = []
    with ThreadPoolExecutor(2) as threads:
        results, crashes = asyncio.run(closed_files.analyse(closed_files.Pool(threads, 2), found, Config(), done.append))
    assert crashes == {} and sum(done) == 10
    assert sorted(results) == sorted(f.target.path for f in found)
    assert all([d.code for d in r.diagnostics] == ["GG002"] for r in results.values())


def test_a_file_whose_analysis_crashed_is_reported_as_an_error_not_as_clean(tmp_path, monkeypatch):
    import gradguard.api

    real = gradguard.api.analyze_bytes

    def flaky(data, path, config=None):
        if path.rsplit("/", 1)[-1] == "boom.py":
            raise RecursionError("maximum recursion depth exceeded")
        return real(data, path, config)

    monkeypatch.setattr(gradguard.api, "analyze_bytes", flaky)
    monkeypatch.setattr(closed_files, "ProcessPoolExecutor", lambda *a, **k: (_ for _ in ()).throw(OSError(38, "no")))
    (tmp_path / "boom.py").write_text(LEAF)
    (tmp_path / "fine.py").write_text(LEAF)
    found = closed_files.survey({tmp_path: Config()})
    with ThreadPoolExecutor(2) as threads:
        results, crashes = asyncio.run(closed_files.analyse(closed_files.Pool(threads, 2), found, Config(), lambda n: None))
    assert list(results) == [tmp_path / "fine.py"] and list(crashes) == [tmp_path / "boom.py"]
    shown = closed_files.crash_diagnostic(crashes[tmp_path / "boom.py"])
    assert "RecursionError" in shown.message and shown.message.endswith("nothing in this file was checked")
