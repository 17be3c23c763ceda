"""Pull diagnostics' result ids (``textDocument/diagnostic``): an unchanged document, configuration, pyproject.toml,
baseline file and probe result is answered "unchanged"; a change to any of them gets a full report and a new id."""

from __future__ import annotations

import json

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_baseline import TRAIN
from test_lsp import LEAF, URI, change_range, open_doc, pull, rng

from gradguard.cli import main

pytestmark = [pytest.mark.asyncio, pytest.mark.pull]


async def test_unchanged_answer_sends_no_items(client: LanguageClient):
    open_doc(client, LEAF)
    first = await pull(client)
    assert first.kind == "full" and len(first.items) == 1 and first.result_id
    assert ":" not in first.result_id  # opaque: not "version:generation", which a restarted server repeats
    again = await pull(client, previous=first.result_id)
    assert again.kind == "unchanged" and again.result_id == first.result_id
    assert not hasattr(again, "items") or not getattr(again, "items", None)
    stale = await pull(client, previous="1:0")  # an id this server never gave
    assert stale.kind == "full" and len(stale.items) == 1
    change_range(client, rng(0, 0, 0, 0), "# moved\n", version=2)
    moved = await pull(client, previous=first.result_id)
    assert moved.kind == "full" and moved.result_id != first.result_id


async def test_pyproject_change_changes_the_id(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    uri = (tmp_path / "model.py").as_uri()
    open_doc(client, LEAF, uri=uri)
    first = await pull(client, uri=uri)
    assert len(first.items) == 1
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.gradguard]\nignore = ['GG002']\n")
    after = await pull(client, previous=first.result_id, uri=uri)
    assert after.kind == "full" and len(after.items) == 0 and after.result_id != first.result_id
    assert (await pull(client, previous=after.result_id, uri=uri)).kind == "unchanged"


async def test_rewritten_baseline_file_changes_the_id(client: LanguageClient, tmp_path, tmp_path_factory, monkeypatch):
    """``gradguard check --write-baseline`` run in a terminal while the file is open: the next pull hides the
    finding it recorded (the pyproject.toml itself did not change)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    baseline = tmp_path / "gg-baseline.json"
    baseline.write_text(json.dumps({"version": 1, "files": {}}))
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.gradguard]\nbaseline = 'gg-baseline.json'\n")
    uri = (tmp_path / "src" / "train.py").as_uri()
    open_doc(client, TRAIN, uri=uri)
    first = await pull(client, uri=uri)
    assert [d.code for d in first.items] == ["GG001"]

    gen = tmp_path_factory.mktemp("gen")  # the same tree without configuration: its baseline records the finding
    (gen / "src").mkdir()
    (gen / "src" / "train.py").write_text(TRAIN)
    monkeypatch.chdir(gen)
    monkeypatch.setenv("GRADGUARD_NO_CACHE", "1")
    assert main(["check", "--write-baseline", "gg-baseline.json", "-q", "src"]) == 0
    stamp = (tmp_path / "pyproject.toml").stat().st_mtime_ns
    baseline.write_text((gen / "gg-baseline.json").read_text())
    assert json.loads(baseline.read_text())["files"] and (tmp_path / "pyproject.toml").stat().st_mtime_ns == stamp
    after = await pull(client, previous=first.result_id, uri=uri)
    assert after.kind == "full" and len(after.items) == 0 and after.result_id != first.result_id
