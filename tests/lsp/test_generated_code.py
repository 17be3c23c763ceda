"""The server's cache of the code attrs and dataclasses generate (``gradguard.lsp.generated_code``): a start after
one that saved it compiles (next to) none of pygls's protocol classes, the classes built from it work as compiled
ones do, and a damaged cache file, or none written under ``PYTHONDONTWRITEBYTECODE``, changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# A start: the server's imports, then the fix layer (after which the server saves), then what it compiled and used.
START = """
import json, sys, dataclasses
import gradguard.lsp.main
from gradguard.lsp import generated_code as g, on_demand
on_demand._import(on_demand.FIX_LAYER)
from lsprotocol import types, converters
position = types.Position(line=3, character=4)
converter = converters.get_converter()
again = converter.structure(converter.unstructure(position), types.Position)
@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 2
print(json.dumps({"added": g._added, "used": len(g._used), "path": str(g.cache_path()),
                  "same": again == position and again is not position and repr(again) == "3:4",
                  "dataclass": Point(1) == Point(1, 2) and hash(Point(1)) == hash(Point(1, 2)) and repr(Point(1)) ==
                               "Point(x=1, y=2)" and Point.__init__.__code__.co_filename == "<string>",
                  "attrs_file": types.Position.__init__.__code__.co_filename}))
"""


def start(prefix: Path, write: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, timeout=120, env=env,
                          check=True)
    return json.loads(done.stdout)


def test_a_second_start_compiles_next_to_nothing_and_its_classes_work(tmp_path):
    first = start(tmp_path)
    assert first["used"] > 1000  # lsprotocol's classes, libcst's nodes...
    assert Path(first["path"]).is_relative_to(tmp_path) and Path(first["path"]).exists()
    second = start(tmp_path)
    assert second["used"] >= first["used"] - 5
    assert second["added"] <= 0.01 * second["used"]  # attrs' hash salt varies per process: a class or so
    for run in (first, second):
        assert run["same"] and run["dataclass"]
        assert run["attrs_file"] == "<attrs generated methods lsprotocol.types.Position>"


def test_a_damaged_cache_or_none_changes_nothing(tmp_path):
    first = start(tmp_path, write=False)
    assert not Path(first["path"]).exists()
    Path(first["path"]).parent.mkdir(parents=True)
    for damaged in (b"", b"gradguard generated code, another python\n" + b"\0" * 100, b"\xff" * 1000):
        Path(first["path"]).write_bytes(damaged)
        run = start(tmp_path, write=False)
        assert run["same"] and run["dataclass"] and run["added"] == run["used"] > 1000
