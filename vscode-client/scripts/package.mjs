#!/usr/bin/env node
// Builds the gradguard .vsix files with vsce, as extensions with native parts do (ruff's, for one):
//
//   node vscode-client/scripts/package.mjs                 gradguard.vsix: universal, no libcst inside
//   node vscode-client/scripts/package.mjs linux-x64 ...   gradguard-linux-x64.vsix, ...: `vsce package --target`,
//                                                          with libcst for CPython 3.10-3.14 of that platform
//   node vscode-client/scripts/package.mjs all             the universal one and every target below
//
// For each .vsix, vsce runs the `vscode:prepublish` script (esbuild, bundle_libs.py, bundle_libcst.py);
// GRADGUARD_VSIX_TARGET tells bundle_libcst.py which platform's wheels to put in vscode-client/bundled/libcst
// (unset: it empties that folder).  The Marketplace serves each user the .vsix of their platform, and the
// universal one to the platforms with none (alpine, armhf, web...).
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TARGETS = ["linux-x64", "linux-arm64", "darwin-arm64", "darwin-x64", "win32-x64"];
const vsce = path.join(REPO, "node_modules", ".bin", process.platform === "win32" ? "vsce.cmd" : "vsce");

let wanted = process.argv.slice(2);
if (wanted.length === 0) wanted = ["universal"];
if (wanted.includes("all")) wanted = ["universal", ...TARGETS];
for (const t of wanted) {
  if (t !== "universal" && !TARGETS.includes(t)) {
    console.error(`package.mjs: unknown target ${t}; known: universal, ${TARGETS.join(", ")}, all`);
    process.exit(2);
  }
}
for (const t of wanted) {
  const env = { ...process.env };
  const out = t === "universal" ? "gradguard.vsix" : `gradguard-${t}.vsix`;
  const args = ["package", "--out", out];
  if (t === "universal") delete env.GRADGUARD_VSIX_TARGET;
  else {
    env.GRADGUARD_VSIX_TARGET = t;
    args.push("--target", t);
  }
  const t0 = Date.now();
  const r = spawnSync(vsce, args, { cwd: REPO, env, stdio: "inherit", shell: process.platform === "win32" });
  if (r.status !== 0) {
    console.error(`package.mjs: vsce package ${args.join(" ")} failed (exit ${r.status})`);
    process.exit(r.status ?? 1);
  }
  console.log(`package.mjs: ${out} (${t}) in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}
