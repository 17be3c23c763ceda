// Test-only driver for the gradguard end-to-end test (run by ../run-e2e.mjs in code-server).
//
// With GRADGUARD_E2E_DIR set it:
//  1. opens GRADGUARD_E2E_FILE and waits for the gradguard extension and its server;
//  2. checks the diagnostics: exactly one, GG002-like code GRADGUARD_E2E_CODE on line GRADGUARD_E2E_LINE,
//     from source "gradguard", with a documentation link and related information;
//  3. checks the hover and lists the quick fixes (vscode.executeCodeActionProvider), picks the fix to
//     apply (a real preferred fix when the server offers one, else "Suppress CODE on this line") and
//     computes the text it must produce;
//  4. puts the cursor on the finding (so the lightbulb shows) and writes ready.json for the harness,
//     which takes screenshots and applies the fix through the workbench UI (quick-fix menu, Ctrl+S);
//     with GRADGUARD_E2E_APPLY=api the driver applies it itself (workspace.applyEdit + save);
//  5. waits until the document holds that text, is saved, and the finding is gone, then writes result.json.
// GRADGUARD_E2E_REQUIRE_FIX=1: a real fix must be offered (the suppression alone fails the run);
// GRADGUARD_E2E_LIBCST=bundled|environment|none: where the server's libcst must come from.
const vscode = require("vscode");
const fs = require("fs");
const path = require("path");

const PRODUCT = "gradguard.gradguard";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, timeoutMs, probe) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

function writeJson(dir, name, value) {
  const file = path.join(dir, name);
  fs.writeFileSync(file + ".tmp", JSON.stringify(value, null, 2));
  fs.renameSync(file + ".tmp", file); // atomic for the polling harness
}

const codeOf = (d) => (d.code && typeof d.code === "object" ? String(d.code.value) : String(d.code));

/** Apply one document's TextEdits to `text` (offsets from `doc`, which holds `text`). */
function applyEdits(doc, text, edits) {
  const spans = edits
    .map((e) => ({ start: doc.offsetAt(e.range.start), end: doc.offsetAt(e.range.end), newText: e.newText }))
    .sort((a, b) => b.start - a.start);
  for (const s of spans) text = text.slice(0, s.start) + s.newText + text.slice(s.end);
  return text;
}

async function scenario(dir, log) {
  const file = process.env.GRADGUARD_E2E_FILE;
  const code = process.env.GRADGUARD_E2E_CODE || "GG002";
  const line = Number(process.env.GRADGUARD_E2E_LINE || "4") - 1;
  const timeout = Number(process.env.GRADGUARD_E2E_TIMEOUT_MS || "30000");
  const t0 = Date.now();
  const uri = vscode.Uri.file(file);
  log(`VS Code ${vscode.version} (${vscode.env.appHost}); file ${file}`);

  const product = vscode.extensions.getExtension(PRODUCT);
  if (!product) throw new Error(`${PRODUCT} is not installed`);
  log(`${PRODUCT} ${product.packageJSON.version} from ${product.extensionPath}`);

  const doc = await vscode.workspace.openTextDocument(uri);
  const editor = await vscode.window.showTextDocument(doc);
  const original = doc.getText();

  await waitFor(`${PRODUCT} to activate`, timeout, () => product.isActive);
  const api = product.exports;
  const state = await api.whenIdle();
  if (state !== "running") throw new Error(`gradguard server is ${state}: ${api.lastError}`);
  log(`server: ${JSON.stringify(api.server)}`);
  const wantLibcst = process.env.GRADGUARD_E2E_LIBCST;
  if (wantLibcst) {
    const got = api.server.libcst ? api.server.libcst.source || "none" : "not reported";
    if (got !== wantLibcst) {
      throw new Error(`the server's libcst is ${got} (${JSON.stringify(api.server.libcst)}), expected ${wantLibcst}; notice: ${api.notice}`);
    }
  }
  const trusted = process.env.GRADGUARD_E2E_TRUSTED !== "0";
  if (vscode.workspace.isTrusted !== trusted || api.server.trusted !== trusted) {
    throw new Error(`workspace trusted=${vscode.workspace.isTrusted}, server trusted=${api.server.trusted}; expected ${trusted}`);
  }
  const tServer = Date.now();

  const findings = () => vscode.languages.getDiagnostics(uri).filter((d) => d.source === "gradguard");
  const diags = await waitFor("gradguard diagnostics", timeout, () => (findings().length ? findings() : null));
  await sleep(300); // a second copy (push and pull both shown) would arrive now
  const all = vscode.languages.getDiagnostics(uri);
  for (const d of all) {
    log(`diagnostic line ${d.range.start.line + 1} ${codeOf(d)} severity=${d.severity} source=${d.source}: ${d.message}`);
  }
  if (all.length !== 1) throw new Error(`expected exactly one diagnostic, got ${all.length}`);
  const d = diags[0];
  if (codeOf(d) !== code) throw new Error(`expected ${code}, got ${codeOf(d)}`);
  if (d.range.start.line !== line) throw new Error(`expected line ${line + 1}, got ${d.range.start.line + 1}`);
  if (d.severity !== vscode.DiagnosticSeverity.Error) throw new Error(`expected severity Error, got ${d.severity}`);
  const href = d.code && typeof d.code === "object" && d.code.target ? d.code.target.toString() : "";
  if (!href.includes(code)) throw new Error(`no documentation link for ${code}: ${JSON.stringify(d.code)}`);
  if (!d.relatedInformation || d.relatedInformation.length === 0) throw new Error("no related information");
  log(`related: ${d.relatedInformation.map((r) => `line ${r.location.range.start.line + 1}: ${r.message}`).join("; ")}`);
  const tDiag = Date.now();

  const hovers = await vscode.commands.executeCommand("vscode.executeHoverProvider", uri, d.range.start);
  const hoverText = (hovers || [])
    .flatMap((h) => h.contents)
    .map((c) => (typeof c === "string" ? c : c.value))
    .join("\n");
  if (!hoverText.includes(code)) throw new Error(`hover does not mention ${code}: ${JSON.stringify(hoverText)}`);

  const actions =
    (await vscode.commands.executeCommand(
      "vscode.executeCodeActionProvider",
      uri,
      d.range,
      vscode.CodeActionKind.QuickFix.value,
      50, // itemResolveCount: the server lists actions without edits and makes them on codeAction/resolve
    )) || [];
  for (const a of actions) log(`code action: ${a.title} kind=${a.kind && a.kind.value} preferred=${!!a.isPreferred}`);
  const quickfixes = actions.filter((a) => a.edit && a.kind && vscode.CodeActionKind.QuickFix.contains(a.kind));
  const suppress = quickfixes.find((a) => a.title === `Suppress ${code} on this line`);
  const fix = quickfixes.find((a) => a !== suppress && a.isPreferred) || quickfixes.find((a) => a !== suppress);
  if (!fix && process.env.GRADGUARD_E2E_REQUIRE_FIX === "1") {
    throw new Error(
      `no fix offered for ${code}, only: ${actions.map((a) => a.title).join(" | ") || "nothing"}; ` +
        `server libcst ${JSON.stringify(api.server.libcst)}; notice: ${api.notice}`,
    );
  }
  const chosen = fix || suppress;
  if (!chosen) throw new Error("no quick fix with an edit");
  const edits = chosen.edit.get(uri);
  const expected = applyEdits(doc, original, edits);
  if (expected === original) throw new Error(`"${chosen.title}" changes nothing`);
  log(`chosen: "${chosen.title}" (${fix ? "a fix" : "the suppression"})`);

  // Cursor on the finding: the lightbulb appears; the harness screenshots and applies the fix.
  editor.selection = new vscode.Selection(d.range.start, d.range.start);
  editor.revealRange(d.range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  writeJson(dir, "ready.json", {
    line: line + 1,
    code,
    title: chosen.title,
    kind: fix ? "fix" : "suppress",
    expected,
    actions: actions.map((a) => a.title),
    server: api.server,
    notice: api.notice,
  });

  if (process.env.GRADGUARD_E2E_APPLY === "api") {
    if (!(await vscode.workspace.applyEdit(chosen.edit))) throw new Error("workspace.applyEdit returned false");
    await doc.save();
  }
  await waitFor("the fix to be applied and saved", timeout * 2, () => doc.getText() === expected && !doc.isDirty);
  await waitFor(`${code} to go away`, timeout, () => !findings().some((x) => codeOf(x) === code));
  return {
    title: chosen.title,
    kind: fix ? "fix" : "suppress",
    text: doc.getText(),
    ms: { server: tServer - t0, diagnostics: tDiag - t0, total: Date.now() - t0 },
  };
}

exports.activate = function activate() {
  const dir = process.env.GRADGUARD_E2E_DIR;
  if (!dir) return;
  const lines = [];
  const log = (m) => {
    lines.push(m);
    console.log(`[gradguard-e2e] ${m}`);
  };
  // not awaited: activation must return so that the rest of the workbench starts
  scenario(dir, log).then(
    (r) => writeJson(dir, "result.json", { ok: true, ...r, log: lines }),
    (e) => writeJson(dir, "result.json", { ok: false, error: String((e && e.stack) || e), log: lines }),
  );
};

exports.deactivate = function deactivate() {};
