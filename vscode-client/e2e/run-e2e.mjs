#!/usr/bin/env node
// End-to-end test of the gradguard .vsix in a real VS Code: code-server 4.100.3 (VS Code 1.100.3,
// the real extension host) driven by headless Chromium through playwright-core.
//
//   node vscode-client/e2e/run-e2e.mjs        (after `npm run package` and scripts/setup-vscode-e2e.sh)
//
// 1. packages the test-only driver extension (e2e/driver) and installs it with the product .vsix into a
//    throwaway extensions dir; 2. starts code-server on a free loopback port with every config, data,
//    cache and temp dir inside the work dir; 3. opens the workbench in Chromium on a copy of
//    e2e/fixture/leaf.py; 4. the driver checks the diagnostic (GG002 on line 4), the hover and the quick
//    fixes, and puts the cursor on the finding; 5. this script checks the squiggle, the lightbulb and the
//    status bar item in the page, takes screenshots, opens the quick-fix menu (Ctrl+.), clicks the fix the
//    driver chose (a real fix if the server has one, else "Suppress GG002 on this line"), saves (Ctrl+S),
//    and checks the file on disk.  Exit code 0 = pass; the last line is `GRADGUARD-E2E-RESULT {json}`.
//
// Environment: CODE_SERVER (else ~/.cache/gradguard/code-server-4.100.3 or PATH), CHROMIUM (else
// /usr/bin/chromium), GRADGUARD_VSIX (else ./gradguard.vsix), GRADGUARD_E2E_PYTHON (interpreter for the
// server, else python3), GRADGUARD_E2E_SCREENSHOTS (copy the screenshots there, e.g. docs/images),
// GRADGUARD_E2E_WORKDIR (else a new temp dir), GRADGUARD_E2E_KEEP=1 (keep the work dir),
// GRADGUARD_E2E_TIMEOUT (seconds, default 120), GRADGUARD_E2E_APPLY=api (driver applies the fix itself),
// GRADGUARD_E2E_UNTRUSTED=1 (workspace trust on, folder untrusted, with workspace settings to be ignored).
// GRADGUARD_E2E_FIXTURE + GRADGUARD_E2E_CODE + GRADGUARD_E2E_LINE (another file with one finding),
// GRADGUARD_E2E_REQUIRE_FIX=1 (a real fix must be offered and applied, not the suppression),
// GRADGUARD_E2E_LIBCST=bundled|environment|none (where the server's libcst must come from),
// GRADGUARD_E2E_NOTIFICATIONS=1 (list the workbench's notifications in the result, from the notification center).
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const CS_VERSION = "4.100.3";
const env = process.env;
// GRADGUARD_E2E_FIXTURE (a .py file), GRADGUARD_E2E_CODE and GRADGUARD_E2E_LINE: another file and its one finding
const FIXTURE = env.GRADGUARD_E2E_FIXTURE
  ? { path: path.resolve(env.GRADGUARD_E2E_FIXTURE), code: env.GRADGUARD_E2E_CODE, line: Number(env.GRADGUARD_E2E_LINE) }
  : { path: path.join(HERE, "fixture", "leaf.py"), code: "GG002", line: 4 };
FIXTURE.name = path.basename(FIXTURE.path);
const TIMEOUT_S = Number(env.GRADGUARD_E2E_TIMEOUT || 120);
const t0 = Date.now();
const timings = {};
const mark = (name) => (timings[name] = Number(((Date.now() - t0) / 1000).toFixed(1)));
const log = (m) => console.log(`[e2e ${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s] ${m}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function which(cmd) {
  for (const dir of (env.PATH || "").split(path.delimiter)) {
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {}
  }
  return undefined;
}

function findCodeServer() {
  if (env.CODE_SERVER) return env.CODE_SERVER;
  const prefix = env.GRADGUARD_CODE_SERVER_PREFIX || path.join(os.homedir(), ".cache", "gradguard", `code-server-${CS_VERSION}`);
  const local = path.join(prefix, "node_modules", ".bin", "code-server");
  return fs.existsSync(local) ? local : which("code-server");
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor(what, ms, probe) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await sleep(100);
  }
}

const readJson = (file) => {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
};

function tail(file, n = 25) {
  try {
    return fs.readFileSync(file, "utf8").trimEnd().split("\n").slice(-n).join("\n");
  } catch {
    return "";
  }
}

function filesUnder(dir, pred, out = []) {
  let entries = [];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) filesUnder(p, pred, out);
    else if (pred(p)) out.push(p);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
const codeServer = findCodeServer();
const chromiumPath = env.CHROMIUM || (fs.existsSync("/usr/bin/chromium") ? "/usr/bin/chromium" : which("chromium"));
const vsix = path.resolve(env.GRADGUARD_VSIX || path.join(REPO, "gradguard.vsix"));
const python = env.GRADGUARD_E2E_PYTHON || "python3";
// GRADGUARD_E2E_UNTRUSTED=1: workspace trust on and the folder not trusted, so gradguard runs in restricted mode
const untrusted = env.GRADGUARD_E2E_UNTRUSTED === "1";
for (const [what, p, hint] of [
  ["code-server", codeServer, "run scripts/setup-vscode-e2e.sh or set CODE_SERVER"],
  ["chromium", chromiumPath, "run scripts/setup-vscode-e2e.sh or set CHROMIUM"],
  ["the gradguard .vsix", fs.existsSync(vsix) ? vsix : undefined, `run npm run package (looked for ${vsix})`],
]) {
  if (!p) {
    console.error(`e2e: ${what} not found: ${hint}`);
    process.exit(2);
  }
}

const W = env.GRADGUARD_E2E_WORKDIR ? path.resolve(env.GRADGUARD_E2E_WORKDIR) : fs.mkdtempSync(path.join(os.tmpdir(), "gradguard-e2e-"));
// Unix sockets (code-server's, VS Code's IPC, Chromium's singleton) must have paths under ~100 bytes:
// a long work dir gets its temp dir elsewhere.
const shortTmp = W.length > 40 ? fs.mkdtempSync(path.join(fs.existsSync("/tmp") ? "/tmp" : os.tmpdir(), "gge2e-")) : undefined;
const dirs = {
  ws: path.join(W, "ws"),
  ud: path.join(W, "user-data"),
  ext: path.join(W, "extensions"),
  xdg: path.join(W, "xdg"),
  tmp: shortTmp ?? path.join(W, "tmp"),
  e2e: path.join(W, "handshake"),
  shots: path.join(W, "screenshots"),
};
for (const d of Object.values(dirs)) fs.mkdirSync(d, { recursive: true });
for (const f of ["ready.json", "result.json"]) fs.rmSync(path.join(dirs.e2e, f), { force: true });
const file = path.join(dirs.ws, FIXTURE.name);
fs.copyFileSync(FIXTURE.path, file);
if (untrusted) {
  // Workspace values of restricted settings that must be ignored while the folder is not trusted.
  fs.mkdirSync(path.join(dirs.ws, ".vscode"), { recursive: true });
  fs.writeFileSync(
    path.join(dirs.ws, ".vscode", "settings.json"),
    JSON.stringify({ "gradguard.interpreter": ["/nonexistent/workspace-python"], "gradguard.probe.enable": true }),
  );
}
fs.mkdirSync(path.join(dirs.ud, "User"), { recursive: true });
fs.writeFileSync(
  path.join(dirs.ud, "User", "settings.json"),
  JSON.stringify(
    {
      "gradguard.interpreter": [python],
      "security.workspace.trust.enabled": untrusted,
      "security.workspace.trust.startupPrompt": "never",
      "security.workspace.trust.banner": "never",
      "workbench.startupEditor": "none",
      "workbench.tips.enabled": false,
      "workbench.enableExperiments": false,
      "extensions.autoUpdate": false,
      "extensions.autoCheckUpdates": false,
      "extensions.ignoreRecommendations": true,
      "telemetry.telemetryLevel": "off",
      "update.mode": "none",
      "chat.commandCenter.enabled": false,
      "editor.minimap.enabled": false,
      "editor.fontSize": 15,
      "window.commandCenter": false,
      "files.autoSave": "off",
    },
    null,
    2,
  ),
);

// Everything code-server, its extension host, the gradguard server and Chromium write stays in W.
// Python may cache bytecode (in the throwaway extensions dir), as it does on a usual desktop.
const isolatedEnv = {
  ...env,
  TMPDIR: dirs.tmp,
  XDG_CONFIG_HOME: dirs.xdg,
  XDG_DATA_HOME: dirs.xdg,
  XDG_CACHE_HOME: dirs.xdg,
  XDG_STATE_HOME: dirs.xdg,
};
delete isolatedEnv.PYTHONDONTWRITEBYTECODE;
const configFile = path.join(W, "code-server.yaml");
fs.writeFileSync(configFile, "");
const csArgs = ["--config", configFile, "--user-data-dir", dirs.ud, "--extensions-dir", dirs.ext];

let cs; // the code-server process (leader of its own process group)
let browser;
async function cleanup() {
  if (browser) await browser.close().catch(() => undefined);
  browser = undefined;
  if (cs && cs.exitCode === null && cs.signalCode === null) {
    try {
      process.kill(-cs.pid, "SIGTERM"); // the whole group: extension host, gradguard server, watchers
    } catch {}
    const exited = await Promise.race([new Promise((r) => cs.once("exit", () => r(true))), sleep(3000).then(() => false)]);
    if (!exited) {
      try {
        process.kill(-cs.pid, "SIGKILL");
      } catch {}
    }
  }
  cs = undefined;
}
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => cleanup().finally(() => process.exit(130)));
}

function printLogs() {
  console.log(`--- code-server log (tail)\n${tail(path.join(W, "code-server.log"))}`);
  for (const f of filesUnder(path.join(dirs.ud, "logs"), (p) => /gradguard/i.test(path.basename(p)) || /gradguard\.gradguard/.test(p))) {
    console.log(`--- ${path.relative(W, f)}\n${tail(f, 40)}`);
  }
  for (const f of filesUnder(path.join(dirs.ud, "logs"), (p) => /exthost\.log$|remoteexthost\.log$/.test(p))) {
    const errors = fs.readFileSync(f, "utf8").split("\n").filter((l) => /\[error\]/.test(l));
    if (errors.length) console.log(`--- errors in ${path.relative(W, f)}\n${errors.slice(-15).join("\n")}`);
  }
}

let result = { ok: false };
let page;
try {
  log(`work dir ${W}`);
  log(`code-server ${codeServer}; chromium ${chromiumPath}; vsix ${vsix}; server python ${python}`);
  if (untrusted) log("workspace NOT trusted: gradguard must run in restricted mode");

  // 1. the driver .vsix, then both extensions into the throwaway extensions dir
  const driverVsix = path.join(W, "gradguard-e2e-driver.vsix");
  const vsce = path.join(REPO, "node_modules", ".bin", "vsce");
  execFileSync(
    vsce,
    ["package", "--out", driverVsix], // options in the driver's package.json "vsce" (a test-only extension)
    { cwd: path.join(HERE, "driver"), stdio: ["ignore", "ignore", "pipe"], env: isolatedEnv },
  );
  mark("driver_packaged");
  execFileSync(codeServer, [...csArgs, "--install-extension", vsix, "--install-extension", driverVsix], {
    stdio: ["ignore", "pipe", "pipe"],
    env: isolatedEnv,
    timeout: 120_000,
  });
  mark("extensions_installed");
  log("extensions installed");

  // 2. code-server, in its own process group
  const port = await freePort();
  const csLog = fs.openSync(path.join(W, "code-server.log"), "w");
  cs = spawn(
    codeServer,
    [
      ...csArgs,
      "--auth", "none",
      "--bind-addr", `127.0.0.1:${port}`,
      "--disable-telemetry",
      "--disable-update-check",
      ...(untrusted ? [] : ["--disable-workspace-trust"]),
      "--disable-getting-started-override",
      dirs.ws,
    ],
    {
      detached: true,
      stdio: ["ignore", csLog, csLog],
      env: {
        ...isolatedEnv,
        GRADGUARD_E2E_DIR: dirs.e2e,
        GRADGUARD_E2E_FILE: file,
        GRADGUARD_E2E_CODE: FIXTURE.code,
        GRADGUARD_E2E_LINE: String(FIXTURE.line),
        GRADGUARD_E2E_TIMEOUT_MS: "30000",
        GRADGUARD_E2E_TRUSTED: untrusted ? "0" : "1",
      },
    },
  );
  fs.writeFileSync(path.join(W, "code-server.pgid"), String(cs.pid)); // for a wrapper that must clean up
  await waitFor("code-server to listen", 30_000, async () => {
    if (cs.exitCode !== null) throw new Error(`code-server exited with ${cs.exitCode}`);
    try {
      return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok;
    } catch {
      return false;
    }
  });
  mark("code_server_ready");
  log(`code-server listening on 127.0.0.1:${port}`);

  // 3. the workbench in headless Chromium
  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-quic",
    ],
    env: isolatedEnv,
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, deviceScaleFactor: 1 });
  page = await context.newPage();
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(dirs.ws)}`);
  log("workbench opened");

  // 4. the driver's checks inside the extension host
  const ready = await waitFor("the driver (ready.json)", TIMEOUT_S * 1000, () => {
    const r = readJson(path.join(dirs.e2e, "result.json"));
    if (r && !r.ok) throw new Error(`driver failed: ${r.error}\n${(r.log || []).join("\n")}`);
    return readJson(path.join(dirs.e2e, "ready.json"));
  });
  mark("diagnostic_checked");
  log(`driver: ${ready.code} on line ${ready.line}; quick fixes: ${ready.actions.join(" | ")}; applying "${ready.title}"`);
  log(`server: gradguard ${ready.server.gradguard} (${ready.server.importStrategy}) from ${ready.server.location}`);
  if (JSON.stringify(ready.server.command) !== JSON.stringify([python])) {
    throw new Error(`the server ran ${JSON.stringify(ready.server.command)}, not the user's ${python}`);
  }
  const bundledDir = path.join(dirs.ext, "gradguard.gradguard-");
  if (ready.server.importStrategy !== "useBundled" || !ready.server.location.startsWith(bundledDir)) {
    throw new Error(`the server did not run the gradguard bundled in the .vsix: ${ready.server.location}`);
  }

  // 5. what a person sees: squiggle, lightbulb, status bar; then the quick-fix menu, click, save
  const editor = page.locator(".editor-instance .monaco-editor").first();
  await editor.locator(".squiggly-error").first().waitFor({ state: "visible", timeout: 15_000 });
  // the lightbulb: in the gutter (VS Code 1.9x+) or beside the text (older), by codicon class
  const bulb = editor.locator('[class*="lightbulb"], [class*="light-bulb"]').filter({ visible: true }).first();
  await bulb.waitFor({ state: "visible", timeout: 15_000 });
  const status = page.locator(".statusbar-item", { hasText: "gradguard" }).first();
  await status.waitFor({ state: "visible", timeout: 5_000 });
  const statusLabel = (await status.getAttribute("aria-label")) || (await status.innerText());
  log(`status bar: "${statusLabel.trim()}"; lightbulb ${await bulb.getAttribute("class")}`);
  await page.mouse.move(1, 300); // no hover in the first picture
  await sleep(400);

  const box = await page.locator(".editor-group-container").first().boundingBox();
  const clip = { x: box.x, y: box.y, width: Math.min(box.width, 780), height: Math.min(box.height, 190) };
  const wide = { ...clip, width: Math.min(box.width, 940) };
  const shots = [];
  const shoot = async (name, opts = { clip }) => {
    const p = path.join(dirs.shots, name);
    await page.screenshot({ path: p, ...opts });
    shots.push(p);
  };
  await shoot("vscode-squiggle-lightbulb.png");

  // Hover: click into the flagged text, then "Show Hover" (Ctrl+K Ctrl+I).  A synthetic mouse hover is
  // not reliable in headless Chromium.
  const squiggle = await editor.locator(".squiggly-error").first().boundingBox(); // under the text layer
  await page.mouse.click(squiggle.x + 3, squiggle.y + squiggle.height / 2);
  await page.keyboard.press("Control+K");
  await page.keyboard.press("Control+I");
  await page.locator(".monaco-hover").filter({ hasText: ready.code }).first().waitFor({ state: "visible", timeout: 10_000 });
  await sleep(300);
  await shoot("vscode-hover.png", { clip: { ...wide, height: Math.min(box.height, 420) } });
  await page.mouse.move(1, 300);
  await page.keyboard.press("Escape");

  await editor.locator(".view-lines").click({ position: { x: 5, y: 5 } }); // focus the editor
  await page.keyboard.press("Control+G"); // go to the finding's line, as a person would
  await page.keyboard.type(String(ready.line));
  await page.keyboard.press("Enter");
  await page.keyboard.press("Control+.");
  const item = page.locator(".action-widget .monaco-list-row", { hasText: ready.title }).first();
  await item.waitFor({ state: "visible", timeout: 10_000 });
  await sleep(300);
  await shoot("vscode-quick-fix.png", { clip: { ...wide, height: Math.min(box.height, 250) } });
  mark("screenshots");
  // Choose it with the keyboard (arrows, Enter): the menu's pointer block makes synthetic clicks unreliable.
  for (let i = 0; ; i++) {
    const focused = page.locator(".action-widget .monaco-list-row.focused").first();
    const label = (await focused.getAttribute("aria-label")) || (await focused.innerText());
    if (label.startsWith(ready.title) || label.includes(ready.title)) break;
    if (i > 10) throw new Error(`"${ready.title}" never got the focus in the quick-fix menu (last: ${label})`);
    await page.keyboard.press("ArrowDown");
  }
  await page.keyboard.press("Enter");
  await waitFor("the edit to show in the editor", 10_000, async () => (await page.locator(".tab.active.dirty").count()) > 0);
  await page.keyboard.press("Control+S");

  // 6. the driver's verdict, and the file on disk
  result = await waitFor("the driver (result.json)", 60_000, () => readJson(path.join(dirs.e2e, "result.json")));
  mark("fix_applied");
  if (!result.ok) throw new Error(`driver failed: ${result.error}`);
  const onDisk = fs.readFileSync(file, "utf8");
  if (onDisk !== ready.expected) {
    throw new Error(`file on disk differs from the expected fix:\n--- disk\n${onDisk}\n--- expected\n${ready.expected}`);
  }
  await editor.locator(".squiggly-error").first().waitFor({ state: "detached", timeout: 10_000 });
  log(`fixed on disk (${result.kind}): line ${ready.line} is now ${JSON.stringify(onDisk.split("\n")[ready.line - 1])}`);

  let notifications;
  if (env.GRADGUARD_E2E_NOTIFICATIONS === "1") {
    // every notification of the session, toast or not: open the notification center (the status-bar bell)
    await page.locator('[id="status.notifications"]').first().click();
    const center = page.locator(".notifications-center");
    await center.waitFor({ state: "visible", timeout: 10_000 });
    await sleep(500);
    notifications = (await center.locator(".notification-list-item-message").allInnerTexts()).map((t) => t.trim());
    log(`notifications: ${JSON.stringify(notifications)}`);
  }

  if (env.GRADGUARD_E2E_SCREENSHOTS) {
    const out = path.resolve(env.GRADGUARD_E2E_SCREENSHOTS);
    fs.mkdirSync(out, { recursive: true });
    for (const s of shots) fs.copyFileSync(s, path.join(out, path.basename(s)));
    log(`screenshots copied to ${out}`);
  }
  result = {
    ok: true,
    code: ready.code,
    line: ready.line,
    applied: ready.title,
    kind: result.kind,
    trusted: !untrusted,
    status: statusLabel.trim(),
    server: ready.server,
    driver_ms: result.ms,
    notifications,
    notice: ready.notice,
    screenshots: shots,
  };
} catch (e) {
  result = { ok: false, error: String((e && e.message) || e) };
  console.error(`e2e FAILED: ${result.error}`);
  const driver = readJson(path.join(dirs.e2e, "result.json"));
  if (driver?.log) console.log(`--- driver log\n${driver.log.join("\n")}`);
  if (page) {
    const p = path.join(dirs.shots, "failure.png");
    await page.screenshot({ path: p }).catch(() => undefined);
    fs.writeFileSync(path.join(dirs.shots, "failure.html"), await page.content().catch(() => ""));
    console.log(`--- screenshot and HTML of the page: ${p}, failure.html`);
  }
  printLogs();
} finally {
  await cleanup();
  mark("total");
}
result.timings_s = timings;
result.workdir = W;
const keep = env.GRADGUARD_E2E_KEEP === "1" || !result.ok;
if (!keep && !env.GRADGUARD_E2E_WORKDIR) fs.rmSync(W, { recursive: true, force: true });
if (shortTmp) fs.rmSync(shortTmp, { recursive: true, force: true });
log(`${result.ok ? "PASS" : "FAIL"} in ${timings.total} s${keep ? ` (work dir kept: ${W})` : ""}`);
console.log(`GRADGUARD-E2E-RESULT ${JSON.stringify(result)}`);
process.exit(result.ok ? 0 : 1);
