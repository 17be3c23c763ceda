"""Build the pinned real-code corpus of issues 8 and 30 from PyPI wheels into bench/corpus/ (gitignored).

    python bench/build_corpus.py [--dest bench/corpus]

Each package is fetched with ``pip download --no-deps`` (torchvision as its manylinux x86_64 cp311
wheel), unpacked, and only its ``.py`` files are kept, in ``bench/corpus/<name>-<version>/``.  A
package whose folder is already there is skipped, so a second run costs nothing.  Prints files and
lines per package and the density of in-place idioms per 1,000 lines, counted with ``ast``:
augmented assignments (``x += y``), ``.op_()`` calls (a method whose name ends in one underscore),
``inplace=True`` keywords and subscript writes (``x[i] = y``, ``x[i] += y``).
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
PLATFORM = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp",
            "--abi", "cp311", "--only-binary=:all:"]
# (distribution, version, extra pip download arguments)
PACKAGES = [
    ("timm", "1.0.31", []),
    ("torchvision", "0.29.1", PLATFORM),
    ("pytorch-lightning", "2.6.6", []),
    ("accelerate", "1.15.0", []),
    # issue 30: widened to 44 packages, 2.14M lines, for precision (none of the issue's reserved packages)
    ("fastai", "2.8.12", []),
    ("skorch", "1.4.0", []),
    ("torchrl", "0.14.1", PLATFORM),
    ("tianshou", "2.0.1", []),
    ("pfrl", "0.1.0", []),  # 0.4.0 ships only an sdist
    ("mmengine", "0.10.7", []),
    ("mmdet", "3.3.0", []),
    ("lightly", "1.6.0", []),
    ("flair", "0.15.1", []),
    ("sentence-transformers", "6.2.0", []),
    ("captum", "0.9.0", []),
    ("opacus", "1.6.0", []),
    ("torchattacks", "3.5.1", []),
    ("e3nn", "0.6.0", []),
    ("torchgeo", "0.8.1", []),
    ("pytorch-forecasting", "1.8.0", []),
    ("vit-pytorch", "1.26.11", []),
    ("dalle2-pytorch", "1.15.6", []),
    ("imagen-pytorch", "2.1.0", []),
    ("audiolm-pytorch", "2.4.0", []),
    ("torch-optimizer", "0.3.0", []),
    ("mosaicml", "0.32.1", []),
    ("pytorch-ignite", "0.5.5", []),
    ("allennlp", "2.10.1", []),
    ("pytorch-widedeep", "1.7.0", []),
    ("tsai", "1.0.1", []),
    ("neuralforecast", "3.3.0", []),
    ("espnet", "202511", []),
    ("asteroid", "0.7.0", []),
    ("lightweight-gan", "1.2.1", []),
    ("stylegan2-pytorch", "1.9.0", []),
    ("palm-rlhf-pytorch", "0.8.0", []),
    ("byol-pytorch", "0.9.1", []),
    ("backpack-for-pytorch", "1.7.1", []),
    ("pykeen", "1.11.1", []),
    ("sbi", "0.27.0", []),
    ("mmpretrain", "1.2.0", []),
    ("mmsegmentation", "1.2.2", []),
    ("avalanche-lib", "0.6.0", []),
    ("torchsde", "0.2.6", []),
]


def folder_for(name: str, version: str, dest: Path = CORPUS) -> Path:
    return dest / f"{name}-{version}"


def fetch(name: str, version: str, extra: list[str], dest: Path) -> Path:
    target = folder_for(name, version, dest)
    if target.is_dir() and any(target.rglob("*.py")):
        return target
    with tempfile.TemporaryDirectory(prefix="gradguard-corpus-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--quiet", "-d", tmp,
               *extra, f"{name}=={version}"]
        if not extra:
            cmd.insert(-1, "--only-binary=:all:")  # wheels, never an sdist build
        subprocess.run(cmd, check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"{name}=={version}: expected one wheel, got {[w.name for w in wheels]}")
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                if member.endswith(".py") and ".dist-info/" not in member:
                    wheel.extract(member, partial)
        partial.rename(target)  # only a complete folder counts as present
    return target


class Idioms(ast.NodeVisitor):
    """Counts the in-place idioms of issue 8, and the lines that hold at least one."""

    def __init__(self) -> None:
        self.counts = {"augmented assignments": 0, ".op_() calls": 0, "inplace=True": 0, "subscript writes": 0}
        self.lines: set[int] = set()

    def hit(self, kind: str, node: ast.AST) -> None:
        self.counts[kind] += 1
        self.lines.add(node.lineno)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.hit("subscript writes" if isinstance(node.target, ast.Subscript) else "augmented assignments", node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Subscript) for t in node.targets):
            self.hit("subscript writes", node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.endswith("__") \
                and not func.attr.startswith("_"):
            self.hit(".op_() calls", node)
        for kw in node.keywords:
            if kw.arg == "inplace" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                self.hit("inplace=True", node)
        self.generic_visit(node)


def measure(folder: Path) -> dict:
    files = sorted(folder.rglob("*.py"))
    lines = 0
    idioms = Idioms()
    idiom_lines = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in files:
            data = path.read_bytes()
            lines += data.count(b"\n")
            visitor = Idioms()
            try:
                visitor.visit(ast.parse(data))
            except (SyntaxError, ValueError):
                continue
            for kind, n in visitor.counts.items():
                idioms.counts[kind] += n
            idiom_lines += len(visitor.lines)
    return {"files": len(files), "lines": lines, "counts": idioms.counts, "idiom_lines": idiom_lines}


def measure_cached(folder: Path) -> dict:
    """``measure``, kept next to the unpacked package (the corpus is pinned: it never changes)."""
    import json

    saved = folder / ".idioms.json"
    try:
        return json.loads(saved.read_text())
    except (OSError, ValueError):
        result = measure(folder)
        saved.write_text(json.dumps(result))
        return result


# The four packages of issue 8 (bench/run_all.py's precision rows and peer timings were recorded on them).
ISSUE8_PACKAGES = PACKAGES[:4]


def build(dest: Path = CORPUS, quiet: bool = False, packages: list | None = None) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    folders = []
    for name, version, extra in (PACKAGES if packages is None else packages):
        present = folder_for(name, version, dest).is_dir()
        if not quiet:
            print(f"{name}=={version}: {'present, skipped' if present else 'downloading'}", file=sys.stderr, flush=True)
        folders.append(fetch(name, version, extra, dest))
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=CORPUS)
    args = parser.parse_args()
    folders = build(args.dest)
    print("| package | files | lines | aug. assign | .op_() | inplace=True | subscript writes | idiom lines / 1k lines |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = {"files": 0, "lines": 0, "idiom_lines": 0, "counts": dict.fromkeys(Idioms().counts, 0)}
    for folder in folders:
        m = measure_cached(folder)
        c = m["counts"]
        print(f"| {folder.name} | {m['files']:,} | {m['lines']:,} | {c['augmented assignments']:,} | {c['.op_() calls']:,} "
              f"| {c['inplace=True']:,} | {c['subscript writes']:,} | {1000 * m['idiom_lines'] / max(m['lines'], 1):.1f} |")
        for key in ("files", "lines", "idiom_lines"):
            total[key] += m[key]
        for kind, n in c.items():
            total["counts"][kind] += n
    c = total["counts"]
    per_k = {k: 1000 * v / max(total["lines"], 1) for k, v in c.items()}
    print(f"| **total** | {total['files']:,} | {total['lines']:,} | {c['augmented assignments']:,} | {c['.op_() calls']:,} "
          f"| {c['inplace=True']:,} | {c['subscript writes']:,} | {1000 * total['idiom_lines'] / max(total['lines'], 1):.1f} |")
    print("per 1,000 lines: " + ", ".join(f"{k} {v:.1f}" for k, v in per_k.items())
          + f"; all idioms {sum(per_k.values()):.1f}")


if __name__ == "__main__":
    main()
