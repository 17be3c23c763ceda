"""torch proofs of variants, run in a small pool of long-lived worker processes (each imports torch once).

A job is a dict: ``variant`` (path of the variant's Python source), ``original`` (the fixture's path),
``positive``, ``expected_raise`` (or None), ``silent``.  A proof returns ``(proven: bool, why: str)``:

- expect-raise positives: run() raises a RuntimeError whose first line starts with the header's prefix;
- silent positives: run() returns, and its gradients differ from the original fixture's reference();
- negatives: run() returns gradients equal to the original's reference(), and the variant's reference() does too.

Comparisons use ``grads_equal`` of tests/gradients.py, as every torch proof does.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import multiprocessing
import os
import signal
import warnings
from pathlib import Path

from gradients import grads_equal

PROOF_VERSION = "1"  # bump when the proof's meaning changes (invalidates the cache)
TIMEOUT = 20  # seconds per variant

_torch = None
_refs: dict[str, object] = {}
_counter = [0]


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout(f"timed out after {TIMEOUT}s")


def _init() -> None:
    global _torch
    import torch

    torch.set_num_threads(1)
    _torch = torch
    signal.signal(signal.SIGALRM, _on_alarm)


def _load(path: str):
    _counter[0] += 1
    spec = importlib.util.spec_from_file_location(f"variant_{os.getpid()}_{_counter[0]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _original_reference(path: str):
    if path not in _refs:
        _refs[path] = _load(path).reference()
    return _refs[path]


def prove(job: dict) -> tuple[bool, str]:
    if _torch is None:
        _init()
    signal.alarm(TIMEOUT)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return _prove(job)
    except _Timeout as exc:
        return False, str(exc)
    except BaseException as exc:  # noqa: BLE001 - any failure of a variant is a reason to drop it
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    finally:
        signal.alarm(0)


def _prove(job: dict) -> tuple[bool, str]:
    ref = _original_reference(job["original"])
    module = _load(job["variant"])
    raises = job.get("raises", "RuntimeError")
    try:
        result = module.run()
    except (RuntimeError, AttributeError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        if job["expected_raise"] is not None and type(exc).__name__ == raises and first.startswith(job["expected_raise"]):
            return True, "raised as expected"
        if not isinstance(exc, RuntimeError) and job["expected_raise"] is None:
            raise
        return False, f"run() raised another {type(exc).__name__}: {first[:200]}"
    if job["expected_raise"] is not None:
        return False, "run() did not raise"
    if not grads_equal(module.reference(), ref):
        return False, "the variant's reference() differs from the original's"
    equal = grads_equal(result, ref)
    if job["silent"]:
        return (True, "gradients differ") if not equal else (False, "gradients equal reference()")
    return (True, "gradients equal reference()") if equal else (False, "gradients differ from reference()")


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_key(variant_source: str, original_source: str) -> str:
    h = hashlib.sha256()
    for part in (PROOF_VERSION, torch_version(), original_source, variant_source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class ProofCache:
    """Proof results on disk: one JSON file, keyed by ``cache_key``."""

    def __init__(self, directory: Path | None):
        self.path = directory / "proofs.json" if directory else None
        self.data: dict[str, list] = {}
        if self.path and self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.data = {}

    def get(self, key: str):
        return self.data.get(key)

    def put(self, key: str, value) -> None:
        self.data[key] = list(value)

    def save(self) -> None:
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            (self.path.parent / ".gitignore").write_text("*\n")
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            tmp.replace(self.path)


def run_proofs(jobs: list[dict], workers: int = 2, progress=None) -> list[tuple[bool, str]]:
    """Prove ``jobs`` in ``workers`` long-lived processes; results in the jobs' order."""
    if not jobs:
        return []
    ctx = multiprocessing.get_context("fork")
    results: list = [None] * len(jobs)
    with ctx.Pool(workers, initializer=_init, maxtasksperchild=2000) as pool:
        for i, res in pool.imap_unordered(_indexed, list(enumerate(jobs)), chunksize=4):
            results[i] = res
            if progress:
                progress()
    return results


def _indexed(item):
    i, job = item
    return i, prove(job)
