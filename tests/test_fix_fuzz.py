"""A fuzz of concurrent ``check --fix``, editor saves and the result cache (issue 28): random interleavings of
real CLI processes (forked from this one, so each starts in milliseconds) fixing and checking the same files
while an "editor" thread saves whole versions of them (half by rename, half by rewriting in place), all
sharing one result cache across every interleaving.

After each interleaving:

- no file is corrupted: each is exactly one version the editor saved or that version fixed (never a fix
  of one version applied to another, never a mix);
- no stale all-clear: a run with the cache says exactly what a run without it says about the files as they
  are (a result stored under the wrong bytes would be served here, or in a later interleaving);
- no process crashed (a traceback) or reported an exit code outside the contract.

``GRADGUARD_FIX_FUZZ`` sets the number of interleavings (default 12, about 15 s); ``GRADGUARD_FIX_FUZZ_SEED``
the seed.  The counts are printed (``-s``) and kept in ``.fuzz/fix_fuzz.json`` when ``GRADGUARD_FIX_FUZZ_LOG``
names a file.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from gradguard.autofix import writer
from gradguard.cli import main

HEAD = "import torch\n\ndef f(w):\n    x = w * 2\n    y = torch.exp(x)\n"
TAIL = "    return y.sum()\n\nw = torch.ones(3, requires_grad=True)\nf(w).backward()\n"
VERSIONS = [
    HEAD + "    y += 1\n" + TAIL,  # GG001, fixed to y = y + 1
    "import torch\n# a comment the editor added\n\n" + HEAD.split("\n", 1)[1] + "    y += 1\n" + TAIL,  # same, shifted
    HEAD + "    y.mul_(2)\n    y += 1\n" + TAIL,  # two findings
    HEAD + "    y = y + 1\n" + TAIL,  # clean
    HEAD + "    y.add_(torch.exp(x))\n" + TAIL,  # another fix
    HEAD + "    y += 1\n    z = (\n" + TAIL,  # a syntax error: reported, never fixed
]
FILES = ["a.py", "b.py", "c.py"]


def _fixed(text: str) -> str:
    return writer.fix_text(text, "v.py").fixed


def _fork_cli(argv: list[str], cwd: Path, env: dict[str, str], out: Path) -> int:
    """Run ``gradguard`` with ``argv`` in a forked process (stdout and stderr to ``out``); its pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(cwd)
            os.environ.update(env)
            code = main(argv)
        except BaseException:  # noqa: BLE001 - the parent sees it in the output
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    return pid


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _editor(rng: random.Random, root: Path, saves: int, saved: dict[str, set[str]]) -> None:
    for _ in range(saves):
        time.sleep(rng.uniform(0, 0.25))
        name, text = rng.choice(FILES), rng.choice(VERSIONS)
        saved[name].add(text)
        path = root / name
        if rng.random() < 0.5:  # save by rename, as most editors do
            tmp = root / f".{name}.editor~"
            tmp.write_text(text)
            os.replace(tmp, path)
        else:  # save in place
            path.write_text(text)


def _check(root: Path, env: dict[str, str], out: Path, cache: bool) -> tuple[int, list[str]]:
    argv = ["check", "--jobs", "1", "--no-progress", *([] if cache else ["--no-cache"]), *FILES]
    code = _wait(_fork_cli(argv, root, env, out))
    lines = out.read_text().splitlines()
    return code, sorted(line for line in lines if line.startswith(tuple(FILES)))


def test_concurrent_fixes_edits_and_cache(tmp_path):
    count = int(os.environ.get("GRADGUARD_FIX_FUZZ", "12"))
    seed = int(os.environ.get("GRADGUARD_FIX_FUZZ_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    fixed = {v: _fixed(v) for v in VERSIONS}
    assert fixed[VERSIONS[0]] != VERSIONS[0] and fixed[VERSIONS[3]] == VERSIONS[3]
    root, logs = tmp_path / "project", tmp_path / "logs"
    root.mkdir()
    (root / ".git").mkdir()
    logs.mkdir()
    env = {"GRADGUARD_CACHE_DIR": str(tmp_path / "cache"), "GRADGUARD_NO_CACHE": ""}
    tally: Counter = Counter()
    problems: list[str] = []
    started = time.monotonic()
    for n in range(count):
        saved = {name: {rng.choice(VERSIONS)} for name in FILES}
        for name, texts in saved.items():
            (root / name).write_text(next(iter(texts)))
        runs = []
        for k in range(rng.randint(1, 3)):
            argv = ["check", "--fix", "--jobs", "1", "--no-progress"]
            argv += ["--no-cache"] if rng.random() < 0.25 else []
            argv += rng.sample(FILES, rng.randint(1, len(FILES)))
            runs.append((rng.uniform(0, 0.15), argv, "fix"))
        for k in range(rng.randint(0, 2)):
            runs.append((rng.uniform(0, 0.3), ["check", "--jobs", "1", "--no-progress", *FILES], "check"))
        editor = threading.Thread(target=_editor, args=(random.Random(rng.random()), root, rng.randint(0, 3), saved))
        editor.start()
        pids = []
        t0 = time.monotonic()
        for delay, argv, kind in sorted(runs):
            time.sleep(max(0.0, t0 + delay - time.monotonic()))
            out = logs / f"{n}-{len(pids)}.txt"
            pids.append((_fork_cli(argv, root, env, out), out, kind))
        editor.join()
        for pid, out, kind in pids:
            code, text = _wait(pid), out.read_text()
            tally[f"{kind} exit {code}"] += 1
            tally["changed while fixing"] += text.count("changed while fixing")
            if "Traceback" in text or code not in (0, 1, 2):
                problems.append(f"interleaving {n}: {kind} exited {code}:\n{text}")
        for name in FILES:
            now = (root / name).read_text()
            allowed = saved[name] | {fixed[v] for v in saved[name]}
            if now not in allowed:
                tally["corrupted"] += 1
                problems.append(f"interleaving {n}: {name} is corrupted:\n{now}")
        cached = _check(root, env, logs / f"{n}-cached.txt", cache=True)
        fresh = _check(root, env, logs / f"{n}-fresh.txt", cache=False)
        if cached != fresh:
            tally["stale all-clear" if cached[0] == 0 else "stale result"] += 1
            problems.append(f"interleaving {n}: the cache says {cached}, a fresh run {fresh}")
        tally["interleavings"] += 1
    tally["seconds"] = round(time.monotonic() - started)
    report = {"seed": seed, **tally}
    print(f"\nfix fuzz: {json.dumps(report)}")
    if os.environ.get("GRADGUARD_FIX_FUZZ_LOG"):
        Path(os.environ["GRADGUARD_FIX_FUZZ_LOG"]).write_text(json.dumps(report, indent=1) + "\n")
    assert not problems, f"seed {seed}: " + "\n".join(problems[:5])
    assert tally["corrupted"] == 0 and tally["stale all-clear"] == 0
