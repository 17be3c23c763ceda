"""Analysing many files: worker processes and the on-disk result cache, shared by ``gradguard check`` and the
language server's workspace diagnostics, so both split work, cache and count crashes the same way.

Files are analysed in interleaved chunks (big files cluster in one folder, and a folder should not land on one
worker).  A chunk's crash is a bug: its message is kept and the other files go on.  One job analyses its files in
order in one worker process at a time, replaced once it has grown by ``RECYCLE_GROWTH_MB`` (``in_recycled``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

try:
    import resource
except ImportError:  # Windows: no peak to read, one job analyses in-process
    resource = None

from . import api, engine
from .config import Config
from .diagnostics import UNREADABLE, FileResult
from .files import Target
from .inference.project import forget_modules
from .result_cache import ResultCache, digest_of

PARALLEL_MIN_FILES = 8
MAX_CHUNK = 32
# A worker of one job is replaced once its peak resident size has grown this much since it started.  The allocator
# keeps the arenas of a heavy file's objects for the process's life, and the modules the last files read stay
# parsed (``project.FORGET_AFTER_FILES``): in one process a run over 44 packages peaked at 108 MB.  The parent and
# its worker are alive at once, so what counts is their summed proportional size (PSS: shared pages split between
# them): 104 MB replacing at 40 MB of growth, 94 MB at 30 (largest process 74 MB), the same CPU (docs/benchmarks.md).
# A new worker starts from the parent's pages (forked) and reads the modules its files import again.
RECYCLE_GROWTH_MB = 30

Pair = tuple[str, str]  # (path, display)
Progress = Callable[[int], None]  # called with the number of files just done


def analyze_one(path: Path, display: str, config: Config) -> tuple[FileResult, str | None]:
    """One file read once and its bytes analysed: the result and the digest of exactly those bytes (None when
    the file could not be read), so the result cache stores it under the key of what was analysed, and
    ``--fix`` knows whether the text it reads later is the one the findings are about."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return api._input_problem(display, UNREADABLE, f"cannot read file: {exc.strerror or exc}"), None
    return api.analyze_bytes(data, display, config), digest_of(data)


def analyze_chunk(chunk: Sequence[Pair], config: Config, alone: bool = False
                  ) -> tuple[list[FileResult], list[str], dict[str, str]]:
    """Analyse (path, display) pairs; runs in worker processes.  Crashes are bugs: report, go on.  The third
    item maps each display name to the digest of the bytes its result is the analysis of.  Each file is
    analysed once here, so the engine's memos of function texts, kept for an edited document's next version,
    are emptied after each (``engine.forget_texts``).  ``alone``: no other analysis runs in this process (the
    CLI, its workers), so the project modules the last files did not read are dropped too
    (``project.forget_modules``); the language server's threads leave them."""
    results, crashes, digests = [], [], {}
    for path, display in chunk:
        try:
            result, digest = analyze_one(Path(path), display, config)
        except Exception as exc:  # noqa: BLE001 - one file's crash must not lose the others
            crashes.append(f"internal error while analysing {display}: {type(exc).__name__}: {exc}")
            continue
        finally:
            engine.forget_texts()
            if alone:
                forget_modules()
        results.append(result)
        if digest is not None:
            digests[display] = digest
    return results, crashes, digests


def peak_mb() -> float:
    """This process's peak resident size so far, in MB (ru_maxrss: kB on Linux, bytes on macOS), as
    ``/usr/bin/time -v`` and ``docs/benchmarks.md`` count them (kB / 1000)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak / 1000


_worker_start_mb = 0.0  # in a recycled worker: its peak when it started


def _start_recycled() -> None:
    global _worker_start_mb
    _ignore_sigint()
    _worker_start_mb = peak_mb()


def analyze_until_grown(pairs: Sequence[Pair], config: Config, growth_mb: float
                        ) -> tuple[list[FileResult], list[str], dict[str, str], int, bool]:
    """``analyze_chunk`` of ``pairs`` in order, in a worker alone in its process, stopped after the file that made
    the process's peak grow by ``growth_mb`` since it started: also returns how many pairs were done, and whether
    it stopped so (the worker is to be replaced)."""
    results, crashes, digests = [], [], {}
    for done, pair in enumerate(pairs, 1):
        chunk_results, chunk_crashes, chunk_digests = analyze_chunk([pair], config, alone=True)
        results += chunk_results
        crashes += chunk_crashes
        digests.update(chunk_digests)
        if peak_mb() - _worker_start_mb >= growth_mb:
            return results, crashes, digests, done, True
    return results, crashes, digests, len(pairs), False


def chunks(pairs: Sequence[Pair], jobs: int) -> list[list[Pair]]:
    """``pairs`` in interleaved chunks, about four per worker and at most ``MAX_CHUNK`` files each."""
    if not pairs:
        return []
    size = max(1, min(MAX_CHUNK, len(pairs) // (jobs * 4)))
    count = -(-len(pairs) // size)
    return [list(pairs[i::count]) for i in range(count)]


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops them (a worker that took it went on to its next chunk,
    and the parent waited for every chunk: 16-48 s)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_now(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and kill the workers: an interrupted run exits at once."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, AttributeError, ValueError):
            pass
    for process in processes:
        try:
            process.join(1)
        except (OSError, AssertionError, ValueError):
            pass


def in_pool(pairs: list[Pair], config: Config, jobs: int, progress: Progress, results: list, crashes: list,
            pool: Executor | None = None, digests: dict | None = None) -> list[Pair]:
    """Analyse in worker processes (``pool``, else a new one); return the pairs left undone if processes
    cannot run here.  Interrupted (Ctrl-C), a pool of its own is stopped at once and the interrupt goes on."""
    pending = chunks(pairs, jobs)
    try:
        owned = pool is None
        pool = pool or ProcessPoolExecutor(max_workers=min(jobs, len(pending)), initializer=_ignore_sigint)
        try:
            alone = isinstance(pool, ProcessPoolExecutor)  # each worker process analyses one chunk at a time
            futures = {pool.submit(analyze_chunk, chunk, config, alone): chunk for chunk in pending}
            for future in as_completed(futures):
                chunk_results, chunk_crashes, chunk_digests = future.result()
                results += chunk_results
                crashes += chunk_crashes
                if digests is not None:
                    digests.update(chunk_digests)
                pending.remove(futures[future])
                progress(len(futures[future]))
        except BaseException as exc:
            if owned and not isinstance(exc, (OSError, NotImplementedError, BrokenProcessPool)):
                stop_now(pool)
                owned = False
            raise
        finally:
            if owned:
                pool.shutdown()
    except (OSError, NotImplementedError, BrokenProcessPool):
        pass  # no processes in this sandbox, or a worker died: the caller finishes in-process
    return [pair for chunk in pending for pair in chunk]


def in_recycled(pairs: list[Pair], config: Config, progress: Progress, results: list, crashes: list,
                digests: dict) -> list[Pair]:
    """Analyse ``pairs`` in order, in one worker process at a time, each replaced by a new one once it has grown by
    ``RECYCLE_GROWTH_MB`` (``analyze_until_grown``), so the memory one heavy file leaves does not stay for the
    rest of the run.  The pairs go in chunks of ``MAX_CHUNK`` as they come (a folder's files read the same
    modules).  Return the pairs left undone if processes cannot run here or a worker died; interrupted, the
    worker is stopped at once."""
    pending = list(pairs)
    try:
        while pending:
            pool = ProcessPoolExecutor(max_workers=1, initializer=_start_recycled)
            stopped = False
            try:
                grown = False
                while pending and not grown:
                    chunk_results, chunk_crashes, chunk_digests, done, grown = pool.submit(
                        analyze_until_grown, pending[:MAX_CHUNK], config, RECYCLE_GROWTH_MB).result()
                    results += chunk_results
                    crashes += chunk_crashes
                    digests.update(chunk_digests)
                    del pending[:done]
                    progress(done)
            except BaseException as exc:
                if not isinstance(exc, (OSError, NotImplementedError, BrokenProcessPool)):
                    stop_now(pool)
                    stopped = True
                raise
            finally:
                if not stopped:
                    pool.shutdown()
    except (OSError, NotImplementedError, BrokenProcessPool):
        pass  # no processes in this sandbox, or a worker died: the caller finishes in-process
    return pending


def analyze_files(targets: list[Target], config: Config, jobs: int, progress: Progress = lambda n: None,
                  digests: dict[str, str] | None = None):
    """Results (in no particular order) and internal-error messages for every target; ``digests`` (if given)
    gets the digest of the bytes each result is the analysis of, by display name."""
    pairs = [(str(t.path), t.display) for t in targets]
    results: list[FileResult] = []
    crashes: list[str] = []
    digests = digests if digests is not None else {}
    if jobs > 1 and len(pairs) >= PARALLEL_MIN_FILES:
        pairs = in_pool(pairs, config, jobs, progress, results, crashes, digests=digests)
    elif len(pairs) >= PARALLEL_MIN_FILES and resource is not None:
        pairs = in_recycled(pairs, config, progress, results, crashes, digests)
    for pair in pairs:
        chunk_results, chunk_crashes, chunk_digests = analyze_chunk([pair], config, alone=True)
        results += chunk_results
        crashes += chunk_crashes
        digests.update(chunk_digests)
        progress(1)
    return results, crashes


def split_cached(targets: list[Target], cache: ResultCache) -> tuple[list[FileResult], list[Target]]:
    """The cached results of ``targets`` as they are on disk now, and the targets still to analyse."""
    cached, misses = [], []
    for target in targets:
        result = cache.get(target.path, target.display)
        if result is None:
            misses.append(target)
        else:
            cached.append(result)
    return cached, misses


def analyze_cached(targets: list[Target], config: Config, jobs: int, cache: ResultCache | None,
                   progress: Progress = lambda n: None, digests: dict[str, str] | None = None):
    """``analyze_files`` behind the content-hash result cache (``gradguard.result_cache``), if any; the
    files found in the cache count as done at once.  A result is stored only under the key of the bytes it
    is the analysis of (a file edited between the cache's read and the analysis's is not stored).
    ``digests``, if given, gets the digest of the bytes behind each result (a hit's: the bytes keyed)."""
    digests = digests if digests is not None else {}
    if cache is None:
        return analyze_files(targets, config, jobs, progress, digests)
    cached, misses = split_cached(targets, cache)
    for result in cached:
        digests[result.path] = cache.digest(result.path)
    progress(len(cached))
    results, crashes = analyze_files(misses, config, jobs, progress, digests)
    for result in results:
        cache.put(result, digests.get(result.path, ""))  # "": unread, so never stored
    return cached + results, crashes
