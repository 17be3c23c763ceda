"""Install this repository's gradguard and its pure-Python dependencies into vscode-client/bundled/libs.

The .vsix carries that folder; with ``gradguard.importStrategy = "useBundled"`` the extension runs
``python -m gradguard.lsp`` with it first on PYTHONPATH, so any Python >= 3.10 can run the server.

Distributions with compiled extension modules (libcst's parser, PyYAML's C loader) are removed after
the install: their binaries fit one Python version on one platform only, and the .vsix is meant for
all of them.  The server finds such a package in the interpreter's own environment when it is there.
The list of what was kept and dropped is written to bundled/libs/BUNDLE.txt.

Usage: python vscode-client/scripts/bundle_libs.py   (runs this interpreter's pip; needs PyPI)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / "vscode-client" / "bundled" / "libs"
NATIVE_SUFFIXES = (".so", ".pyd", ".dylib")
# jedi's type stubs of third-party packages (requests, six, django, ...): 4,800 files that tell nothing
# about tensors, and jedi does without them (it skips a missing stub folder).  The standard library's
# stubs stay.  Fewer files make the .vsix smaller and `vsce package` (which scans every file) faster.
PRUNE = ["jedi/third_party/typeshed/stubs", "jedi/third_party/django-stubs"]


def record_paths(dist_info: Path) -> list[str]:
    record = dist_info / "RECORD"
    if not record.is_file():
        return []
    return [line.split(",", 1)[0] for line in record.read_text(encoding="utf-8").splitlines() if line.strip()]


def remove_distribution(dist_info: Path, paths: list[str]) -> None:
    tops = set()
    for rel in paths:
        target = (LIBS / rel).resolve()
        if LIBS not in target.parents:
            continue  # RECORD entries such as ../../bin/x: never outside the bundle
        tops.add(LIBS / Path(rel).parts[0])
        if target.is_file() or target.is_symlink():
            target.unlink()
    for top in tops:  # package folders left empty (or holding only caches) go too
        if top.is_dir() and not any(p.is_file() for p in top.rglob("*") if "__pycache__" not in p.parts):
            shutil.rmtree(top)
    shutil.rmtree(dist_info, ignore_errors=True)


def _packaging():
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip always carries a copy
        from pip._vendor.packaging.requirements import Requirement
    return Requirement


PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
PLATFORMS = ["linux", "darwin", "win32"]


def conditional_requirements(libs: Path) -> list[str]:
    """Requirements of the bundled distributions that some Python >= 3.10 on some platform needs but
    that pip left out for this interpreter (tomli below 3.11, exceptiongroup for cattrs below 3.11)."""
    Requirement = _packaging()
    installed = {d.name.split("-")[0].lower().replace("_", "-") for d in libs.glob("*.dist-info")}
    wanted = {}
    for metadata in libs.glob("*.dist-info/METADATA"):
        for line in metadata.read_text(encoding="utf-8").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line[len("Requires-Dist:"):].strip())
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            if name in installed or req.marker is None:
                continue
            envs = [
                {"python_version": v, "python_full_version": v + ".0", "sys_platform": p, "extra": ""}
                for v in PYTHONS for p in PLATFORMS
            ]
            if any(req.marker.evaluate(env) for env in envs):
                wanted[name] = f"{req.name}{req.specifier}"
    return sorted(wanted.values())


def drop_compiled() -> list[str]:
    """Remove every distribution that installed a compiled extension module; return their names."""
    dropped = []
    for dist_info in sorted(LIBS.glob("*.dist-info")):
        paths = record_paths(dist_info)
        if any(p.endswith(NATIVE_SUFFIXES) or ".so." in p for p in paths):
            remove_distribution(dist_info, paths)
            dropped.append(dist_info.name[: -len(".dist-info")])
    return dropped


def main() -> int:
    if LIBS.exists():
        shutil.rmtree(LIBS)
    LIBS.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
         "--no-warn-script-location", "--target", str(LIBS), str(ROOT)],
        check=True,
    )
    shutil.rmtree(LIBS / "bin", ignore_errors=True)  # console scripts pinned to this machine's interpreter
    dropped = drop_compiled()
    # Dependencies whose environment marker leaves them out for this interpreter (tomli below 3.11)
    # are still needed by the other Python versions the bundle serves.
    for _ in range(5):  # until no bundled distribution needs another one
        conditional = conditional_requirements(LIBS)
        if not conditional:
            break
        print(f"also bundling, for other Python versions or platforms: {', '.join(conditional)}")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
             "--no-warn-script-location", "--no-deps", "--target", str(LIBS),
             # the pure-Python wheel (tomli also ships compiled ones), as for the oldest Python served
             "--only-binary=:all:", "--implementation", "py", "--platform", "any", "--python-version", "3.10",
             *conditional],
            check=True,
        )
    kept = sorted(d.name[: -len(".dist-info")] for d in LIBS.glob("*.dist-info"))
    for rel in PRUNE:
        shutil.rmtree(LIBS / rel, ignore_errors=True)
    for cache in LIBS.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    leftovers = [p for p in LIBS.rglob("*") if p.suffix in NATIVE_SUFFIXES or ".so." in p.name]
    if leftovers:
        print(f"compiled files left in the bundle: {leftovers}", file=sys.stderr)
        return 1
    if not (LIBS / "gradguard" / "lsp" / "server.py").is_file():
        print("gradguard is missing from the bundle", file=sys.stderr)
        return 1
    (LIBS / "BUNDLE.txt").write_text(
        "Bundled with the gradguard VS Code extension (pure Python, any platform):\n"
        + "".join(f"  {k}\n" for k in kept)
        + "Not bundled (compiled extension modules; imported from the interpreter's environment when present):\n"
        + "".join(f"  {d}\n" for d in dropped)
        + "Left out (not needed to analyse tensors):\n"
        + "".join(f"  {p}\n" for p in PRUNE),
        encoding="utf-8",
    )
    print(f"bundled {', '.join(kept)}; not bundled (compiled): {', '.join(dropped) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
