#!/usr/bin/env bash
# Installs what the VS Code end-to-end test (tests/vscode/) needs on a fresh Debian machine:
#   - Debian: chromium (drives the web workbench headless), ripgrep (VS Code's search binary;
#     the npm package that normally provides it downloads it from outside the npm registry),
#     libkrb5-dev (headers for code-server's kerberos native module).
#   - npm: code-server 4.100.3 (= VS Code 1.100.3, the last release that runs on Node 20),
#     installed in a way that never downloads anything but npm packages.
# It needs node 20 with npm, and g++/make/python3 for node-gyp (all on this machine kind).
#
# Usage: scripts/setup-vscode-e2e.sh [PREFIX]
#   PREFIX defaults to $GRADGUARD_CODE_SERVER_PREFIX, else ~/.cache/gradguard/code-server-4.100.3;
#   tests/vscode/test_vscode_e2e.py looks there too (or set CODE_SERVER=/path/to/bin/code-server).
# Idempotent: a second run with a working install only checks it (a few seconds).
set -euo pipefail

VERSION=4.100.3
PREFIX=${1:-${GRADGUARD_CODE_SERVER_PREFIX:-$HOME/.cache/gradguard/code-server-$VERSION}}
CS="$PREFIX/node_modules/.bin/code-server"

log() { printf 'setup-vscode-e2e: %s\n' "$*" >&2; }

# --- Debian packages ------------------------------------------------------------------------
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v rg >/dev/null || missing+=(ripgrep)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- node -----------------------------------------------------------------------------------
command -v node >/dev/null || { log "node 20 is required (not found)"; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" = 20 ] || { log "code-server $VERSION needs node 20, found $(node --version)"; exit 1; }

# A throwaway config dir so that `code-server --version` writes nothing into ~/.config.
check_code_server() {
  local w rc=0
  [ -x "$CS" ] || return 1
  w=$(mktemp -d)
  XDG_CONFIG_HOME=$w XDG_DATA_HOME=$w "$CS" --config "$w/c.yaml" --version >"$w/out" 2>&1 || rc=$?
  [ $rc -eq 0 ] && grep -q "^$VERSION " "$w/out" || rc=1
  rm -rf "$w"
  return $rc
}

if check_code_server; then
  log "code-server $VERSION already installed: $CS"
  echo "$CS"
  exit 0
fi

# --- code-server ----------------------------------------------------------------------------
# A plain `npm install code-server` fails offline: its postinstall runs `npm install` in
# lib/vscode, where @vscode/ripgrep's own postinstall downloads rg from outside the registry,
# and npm rolls everything back. So: install without scripts, put Debian's rg where
# @vscode/ripgrep expects it, build the native modules, and do the rest of the postinstall.
t0=$(date +%s)
log "installing code-server $VERSION into $PREFIX (about a minute)"
export npm_config_yes=true          # node-pty's install step runs `npx node-gyp`; an npmrc may say yes=false
export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false
rm -rf "$PREFIX"
mkdir -p "$PREFIX"
cd "$PREFIX"
echo '{"name":"gradguard-code-server","version":"1.0.0","private":true}' > package.json
npm install --no-save --ignore-scripts --loglevel=error "code-server@$VERSION"
npm rebuild --loglevel=error argon2          # its prebuilt-binary download fails here; builds from source
cd node_modules/code-server/lib/vscode
npm install --omit=dev --ignore-scripts --loglevel=error    # pinned by the bundled npm-shrinkwrap.json
mkdir -p node_modules/@vscode/ripgrep/bin
cp "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
# node-pty's post step can fail after pty.node is built: check the outputs instead of the exit code.
npm rebuild --loglevel=error @vscode/spdlog node-pty native-watchdog kerberos @vscode/deviceid || true
for m in @vscode/spdlog/build/Release/spdlog.node node-pty/build/Release/pty.node \
         native-watchdog/build/Release/watchdog.node kerberos/build/Release/kerberos.node; do
  [ -f "node_modules/$m" ] || { log "native module not built: $m"; exit 1; }
done
# The remainder of code-server's postinstall.sh.
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && ln -sfn code-linux.sh code-server)
(cd bin/helpers && ln -sfn browser-linux.sh browser.sh)
(cd extensions && npm install --omit=dev --ignore-scripts --loglevel=error)

check_code_server || { log "code-server does not start"; exit 1; }
log "code-server $VERSION installed in $(( $(date +%s) - t0 )) s: $CS"
echo "$CS"
