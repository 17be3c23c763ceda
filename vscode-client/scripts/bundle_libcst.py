"""Put libcst (the fixes' parser; it has a compiled Rust part) into vscode-client/bundled/libcst for one
VS Code target, so that a platform-specific .vsix (``vsce package --target TARGET``) offers quick fixes with
any CPython 3.10-3.14 the user runs it with, whether or not that interpreter has libcst.

libcst ships one wheel per CPython minor version (cp310 ... cp314; no abi3 wheel) and platform, so the
bundle holds one folder per interpreter tag::

    bundled/libcst/TARGET.json       {"target": "linux-x64", "libcst": "1.9.0", "tags": ["cp310", ...]}
    bundled/libcst/cp311/libcst/...  the cp311 wheel of that target, installed by pip (tests left out)

The extension's preflight asks the interpreter for its tag and puts the matching folder on PYTHONPATH
(see src/settings.ts); with no matching folder it says so once, naming the interpreter.

The wheels are not committed: pip downloads them from PyPI at packaging time, checked against the sha256
pinned in libcst-wheels.json (``pip --require-hashes``), into a cache (~/.cache/gradguard/libcst-wheels,
or $GRADGUARD_WHEEL_CACHE), and installs them from there offline.

Usage:
  python vscode-client/scripts/bundle_libcst.py                 # target from $GRADGUARD_VSIX_TARGET;
                                                                 # unset: the universal .vsix, no libcst
  python vscode-client/scripts/bundle_libcst.py --target linux-x64
  python vscode-client/scripts/bundle_libcst.py --lock           # re-pin: download every target's wheels
                                                                 # and rewrite libcst-wheels.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "vscode-client" / "bundled" / "libcst"
LOCK = Path(__file__).resolve().with_name("libcst-wheels.json")
CACHE = Path(os.environ.get("GRADGUARD_WHEEL_CACHE") or Path.home() / ".cache" / "gradguard" / "libcst-wheels")

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
# VS Code target -> (libcst version, pip --platform values).  The targets ruff's extension publishes
# (besides alpine and armhf).  libcst 1.9 has no Intel-macOS wheels: darwin-x64 gets 1.8.6, the last
# release that has them (gradguard needs libcst >= 1.1).
TARGETS: dict[str, tuple[str, list[str]]] = {
    "linux-x64": ("1.9.0", ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]),
    "linux-arm64": ("1.9.0", ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"]),
    "darwin-arm64": ("1.9.0", ["macosx_11_0_arm64"]),
    "darwin-x64": ("1.8.6", ["macosx_10_15_x86_64"]),
    "win32-x64": ("1.9.0", ["win_amd64"]),
}


def tag_of(python: str) -> str:
    return "cp" + python.replace(".", "")


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *args]
    subprocess.run(cmd, check=True)


def target_flags(platforms: list[str], python: str) -> list[str]:
    flags = ["--only-binary=:all:", "--no-deps", "--implementation", "cp", "--python-version", python,
             "--abi", tag_of(python)]
    for p in platforms:
        flags += ["--platform", p]
    return flags


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def lock() -> int:
    """Download every target's wheels (newest files of the pinned versions) and record their hashes."""
    targets = {}
    for target, (version, platforms) in TARGETS.items():
        wheels = {}
        for python in PYTHONS:
            with tempfile.TemporaryDirectory() as tmp:
                pip("download", f"libcst=={version}", *target_flags(platforms, python), "-d", tmp)
                (whl,) = Path(tmp).glob("*.whl")
                CACHE.mkdir(parents=True, exist_ok=True)
                shutil.copy(whl, CACHE / whl.name)
                wheels[tag_of(python)] = {"file": whl.name, "sha256": sha256(whl)}
                print(f"{target} {tag_of(python)}: {whl.name}")
        targets[target] = {"libcst": version, "platforms": platforms, "wheels": wheels}
    LOCK.write_text(json.dumps({
        "comment": "libcst wheels bundled into each platform-specific .vsix; written by bundle_libcst.py --lock",
        "targets": targets,
    }, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {LOCK.relative_to(ROOT)}")
    return 0


def fetch(version: str, platforms: list[str], python: str, wheel: dict[str, str], req: Path) -> Path:
    """The pinned wheel in the cache: downloaded by pip (hash-checked) unless a good copy is there."""
    cached = CACHE / wheel["file"]
    if cached.is_file() and sha256(cached) == wheel["sha256"]:
        return cached
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pip("download", "--require-hashes", "-r", str(req), *target_flags(platforms, python), "-d", tmp)
        got = Path(tmp) / wheel["file"]
        if not got.is_file():
            raise SystemExit(f"pip did not download {wheel['file']} (got {[p.name for p in Path(tmp).iterdir()]})")
        shutil.copy(got, cached)
    return cached


def bundle(target: str) -> int:
    pinned = json.loads(LOCK.read_text(encoding="utf-8"))["targets"]
    if target not in pinned:
        print(f"unknown target {target!r}; known: {', '.join(pinned)}", file=sys.stderr)
        return 2
    entry = pinned[target]
    version, platforms = entry["libcst"], entry["platforms"]
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tags = []
    with tempfile.TemporaryDirectory() as tmp:
        for python in PYTHONS:
            tag = tag_of(python)
            wheel = entry["wheels"].get(tag)
            if wheel is None:
                print(f"{target}: no libcst {version} wheel pinned for {tag}; skipped")
                continue
            req = Path(tmp) / f"{tag}.txt"
            req.write_text(f"libcst=={version} --hash=sha256:{wheel['sha256']}\n", encoding="utf-8")
            whl = fetch(version, platforms, python, wheel, req)
            # pip installs the wheel for that interpreter and platform, offline, checking the hash again
            pip("install", "--no-index", "--find-links", str(whl.parent), "--require-hashes", "-r", str(req),
                "--no-compile", "--target", str(OUT / tag), *target_flags(platforms, python))
            for tests in sorted((OUT / tag).rglob("tests"), reverse=True):
                if tests.is_dir():  # libcst's own test suite: a third of its files, never imported
                    shutil.rmtree(tests)
            for cache in (OUT / tag).rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(OUT / tag / "bin", ignore_errors=True)
            tags.append(tag)
    (OUT / "TARGET.json").write_text(
        json.dumps({"target": target, "libcst": version, "tags": tags}, indent=2) + "\n", encoding="utf-8")
    print(f"bundled libcst {version} for {target}: {', '.join(tags)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=os.environ.get("GRADGUARD_VSIX_TARGET", ""),
                    help="VS Code target (linux-x64, ...); empty: remove the bundled libcst (universal .vsix)")
    ap.add_argument("--lock", action="store_true", help="re-pin the wheels of every target")
    a = ap.parse_args()
    if a.lock:
        return lock()
    if not a.target:
        shutil.rmtree(OUT, ignore_errors=True)
        print("no target (GRADGUARD_VSIX_TARGET unset): universal .vsix, no libcst bundled")
        return 0
    return bundle(a.target)


if __name__ == "__main__":
    sys.exit(main())
