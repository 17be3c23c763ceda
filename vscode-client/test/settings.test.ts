// Unit tests of the settings -> server command line / environment / options mapping.
// Run: npm run test:unit (tsc to vscode-client/out, then node's test runner).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import * as S from "../src/settings";

type Levels = Partial<Record<"globalValue" | "workspaceValue" | "workspaceFolderValue", unknown>>;

/** An Inspector over a table of `key -> {globalValue, workspaceValue, ...}` (unset keys: undefined). */
function inspector(table: Record<string, Levels> = {}): S.Inspector {
  return (key) => table[key] ?? {};
}

const ctx: S.LaunchContext = {
  bundledLibs: "/ext/vscode-client/bundled/libs",
  cwd: "/ext/vscode-client/bundled",
  env: { PATH: "/usr/bin", HOME: "/home/u" },
  pathDelimiter: ":",
};

function read(table: Record<string, Levels> = {}, trusted = true): S.ExtensionSettings {
  return S.readSettings(inspector(table), trusted).settings;
}

describe("readSettings", () => {
  it("gives the package.json defaults when nothing is set", () => {
    const s = read();
    assert.deepEqual(s, S.DEFAULTS);
    assert.equal(s.select, undefined);
    assert.equal(s.ignore, undefined);
  });

  it("lets folder values override workspace values override user values", () => {
    const s = read({
      importStrategy: { globalValue: "fromEnvironment", workspaceValue: "useBundled" },
      run: { globalValue: "onType", workspaceValue: "onType", workspaceFolderValue: "onSave" },
      interpreter: { globalValue: ["/usr/bin/python3"] },
    });
    assert.equal(s.importStrategy, "useBundled");
    assert.equal(s.run, "onSave");
    assert.deepEqual(s.interpreter, ["/usr/bin/python3"]);
  });

  it("merges severity maps across levels and normalises codes", () => {
    const s = read({
      severity: { globalValue: { GG001: "warning", GG002: "info" }, workspaceValue: { gg002: "Error" } },
    });
    assert.deepEqual(s.severity, { GG001: "warning", GG002: "error" });
  });

  it("drops invalid values with a warning instead of failing", () => {
    const r = S.readSettings(
      inspector({
        importStrategy: { globalValue: "sometimes" },
        interpreter: { globalValue: "/usr/bin/python3" },
        severity: { globalValue: { GG001: "fatal", bogus: "error", GG003: "warning" } },
        "probe.timeout": { globalValue: -1 },
      }),
      true,
    );
    assert.equal(r.settings.importStrategy, "useBundled");
    assert.deepEqual(r.settings.interpreter, []);
    assert.deepEqual(r.settings.severity, { GG003: "warning" });
    assert.equal(r.settings.probe.timeout, 10);
    assert.equal(r.warnings.length, 5);
  });

  it("distinguishes select = [] set by the user from select not set", () => {
    assert.deepEqual(read({ select: { workspaceValue: [] } }).select, []);
    assert.deepEqual(read({ ignore: { globalValue: [" GG005 ", ""] } }).ignore, ["GG005"]);
    assert.equal(read({}).select, undefined);
  });

  describe("in an untrusted workspace", () => {
    const table: Record<string, Levels> = {
      interpreter: { globalValue: ["/usr/bin/python3"], workspaceValue: ["./evil/python"] },
      args: { workspaceFolderValue: ["--evil"] },
      importStrategy: { workspaceValue: "fromEnvironment" },
      "probe.enable": { globalValue: true, workspaceValue: true },
      "probe.device": { workspaceValue: "cuda" },
      select: { workspaceValue: ["GG001"] },
    };

    it("ignores workspace values of the restricted settings", () => {
      const s = read(table, false);
      assert.deepEqual(s.interpreter, ["/usr/bin/python3"]);
      assert.deepEqual(s.args, []);
      assert.equal(s.importStrategy, "useBundled");
      assert.equal(s.probe.device, "cpu");
    });

    it("never enables the probe, even from user settings", () => {
      assert.equal(read(table, false).probe.enable, false);
      assert.equal(read(table, true).probe.enable, true);
    });

    it("still applies workspace rule selection (static analysis only)", () => {
      assert.deepEqual(read(table, false).select, ["GG001"]);
    });

    it("uses workspace values once trusted", () => {
      const s = read(table, true);
      assert.deepEqual(s.interpreter, ["./evil/python"]);
      assert.deepEqual(s.args, ["--evil"]);
    });

    it("matches the restrictedConfigurations of package.json", async () => {
      const { readFileSync } = await import("node:fs");
      const { join } = await import("node:path");
      const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "..", "package.json"), "utf8"));
      const restricted = manifest.capabilities.untrustedWorkspaces.restrictedConfigurations;
      assert.deepEqual(
        restricted,
        S.RESTRICTED.map((k) => `gradguard.${k}`),
      );
      // every setting read here is declared in the manifest, with the same default
      const props = manifest.contributes.configuration.properties;
      for (const key of [...S.RESTRICTED, "select", "ignore", "severity", "run", "diagnosticMode", "logLevel", "trace.server"]) {
        assert.ok(props[`gradguard.${key}`], `gradguard.${key} is declared`);
      }
      assert.equal(props["gradguard.importStrategy"].default, S.DEFAULTS.importStrategy);
      assert.equal(props["gradguard.run"].default, S.DEFAULTS.run);
      assert.equal(props["gradguard.diagnosticMode"].default, S.DEFAULTS.diagnosticMode);
      assert.equal(props["gradguard.probe.timeout"].default, S.DEFAULTS.probe.timeout);
      assert.equal(props["gradguard.probe.device"].default, S.DEFAULTS.probe.device);
      assert.equal(props["gradguard.logLevel"].default, S.DEFAULTS.logLevel);
    });
  });
});

describe("serverSettings (initializationOptions and didChangeConfiguration)", () => {
  it("sends only the [tool.gradguard] keys the user set under gradguard", () => {
    const opts = S.serverSettings(read(), true);
    assert.deepEqual(opts.gradguard, {});
    assert.deepEqual(opts.probe, { enable: false, device: "cpu", timeout: 10 });
    assert.equal(opts.run, "onType");
    assert.equal(opts.diagnosticMode, "openFiles");
    assert.equal(opts.trusted, true);
  });

  it("maps select, ignore and severity", () => {
    const s = read({
      select: { globalValue: ["GG0"] },
      ignore: { workspaceValue: ["GG005"] },
      severity: { globalValue: { GG001: "warning" } },
    });
    assert.deepEqual(S.serverSettings(s, true).gradguard, {
      select: ["GG0"],
      ignore: ["GG005"],
      severity: { GG001: "warning" },
    });
  });

  it("only ever uses keys the server's config_from_table accepts under gradguard", () => {
    const s = read({
      select: { globalValue: ["GG0"] },
      ignore: { globalValue: [] },
      severity: { globalValue: { GG001: "info" } },
      "probe.enable": { globalValue: true },
      run: { globalValue: "onSave" },
    });
    const known = new Set(["select", "ignore", "exclude", "severity", "jedi"]);
    for (const key of Object.keys(S.serverSettings(s, true).gradguard as object)) assert.ok(known.has(key), key);
  });

  it("turns the probe off when untrusted", () => {
    const s = read({ "probe.enable": { globalValue: true } }, true);
    assert.equal((S.serverSettings(s, false).probe as S.ProbeSettings).enable, false);
    assert.equal(S.serverSettings(s, false).trusted, false);
  });
});

describe("resolveInterpreter", () => {
  it("prefers gradguard.interpreter, then the Python extension, then python3", () => {
    const withSetting = read({ interpreter: { globalValue: ["/opt/py/bin/python", "-X", "utf8"] } });
    assert.deepEqual(S.resolveInterpreter(withSetting, ["/venv/bin/python"], "linux"), {
      command: ["/opt/py/bin/python", "-X", "utf8"],
      source: "setting",
    });
    assert.deepEqual(S.resolveInterpreter(read(), ["/venv/bin/python"], "linux"), {
      command: ["/venv/bin/python"],
      source: "python-extension",
    });
    assert.deepEqual(S.resolveInterpreter(read(), undefined, "linux"), { command: ["python3"], source: "default" });
    assert.deepEqual(S.resolveInterpreter(read(), [], "win32"), { command: ["python"], source: "default" });
  });
});

describe("serverLaunch", () => {
  const py: S.Interpreter = { command: ["/usr/bin/python3"], source: "default" };

  it("runs python -m gradguard.lsp with the bundled libs first on PYTHONPATH (useBundled)", () => {
    const l = S.serverLaunch(read(), py, ctx);
    assert.equal(l.command, "/usr/bin/python3");
    assert.deepEqual(l.args, ["-m", "gradguard.lsp"]);
    assert.equal(l.cwd, "/ext/vscode-client/bundled");
    assert.equal(l.env.PYTHONPATH, "/ext/vscode-client/bundled/libs");
    assert.equal(l.env.PATH, "/usr/bin");
    assert.equal(l.env.GRADGUARD_LOG_LEVEL, "WARNING");
    assert.equal(l.env.GRADGUARD_IMPORT_STRATEGY, "useBundled");
  });

  it("keeps an existing PYTHONPATH after the bundled libs", () => {
    const l = S.serverLaunch(read(), py, { ...ctx, env: { PYTHONPATH: "/a;/b" }, pathDelimiter: ";" });
    assert.equal(l.env.PYTHONPATH, "/ext/vscode-client/bundled/libs;/a;/b");
  });

  it("leaves PYTHONPATH alone with fromEnvironment", () => {
    const s = read({ importStrategy: { globalValue: "fromEnvironment" } });
    assert.equal(S.serverLaunch(s, py, ctx).env.PYTHONPATH, undefined);
    const withPath = S.serverLaunch(s, py, { ...ctx, env: { PYTHONPATH: "/mine" } });
    assert.equal(withPath.env.PYTHONPATH, "/mine");
  });

  it("puts the interpreter's own arguments before -m and gradguard.args after", () => {
    const s = read({ args: { globalValue: ["--verbose"] }, logLevel: { globalValue: "debug" } });
    const l = S.serverLaunch(s, { command: ["py", "-3.12"], source: "setting" }, ctx);
    assert.equal(l.command, "py");
    assert.deepEqual(l.args, ["-3.12", "-m", "gradguard.lsp", "--verbose"]);
    assert.equal(l.env.GRADGUARD_LOG_LEVEL, "DEBUG");
  });

  it("checks the interpreter with the same environment", () => {
    const l = S.preflightLaunch(read(), py, ctx);
    assert.deepEqual(l.args, ["-c", S.PREFLIGHT_SCRIPT]);
    assert.equal(l.env.PYTHONPATH, ctx.bundledLibs);
    assert.equal(l.cwd, ctx.cwd);
  });
});

describe("parsePreflight", () => {
  const py: S.Interpreter = { command: ["python3"], source: "default" };
  const ok = (r: object): S.PreflightRun => ({ exitCode: 0, stdout: `noise\nGRADGUARD-PREFLIGHT ${JSON.stringify(r)}\n`, stderr: "" });

  it("returns the server facts when gradguard imports", () => {
    const r = S.parsePreflight(
      ok({ executable: "/usr/bin/python3", version: "3.11.7", gradguard: "0.1.0", location: "/x/gradguard" }),
      read(),
      py,
    );
    assert.deepEqual(r, {
      ok: true,
      info: {
        executable: "/usr/bin/python3",
        version: "3.11.7",
        gradguard: "0.1.0",
        location: "/x/gradguard",
        implementation: "cpython",
        tag: "?",
        platform: "?",
        libcst: { source: null, error: "not reported" },
      },
    });
  });

  it("returns where libcst comes from", () => {
    const libcst = { source: "bundled", version: "1.9.0", path: "/ext/bundled/libcst/cp311", location: "/l" };
    const r = S.parsePreflight(
      ok({ executable: "/p", version: "3.11.7", gradguard: "0.1.0", location: "/x", implementation: "cpython",
        tag: "cp311", platform: "linux x86_64", libcst }),
      read(),
      py,
    );
    assert.equal(r.ok, true);
    assert.deepEqual((r as { info: S.PreflightInfo }).info.libcst, libcst);
    assert.equal((r as { info: S.PreflightInfo }).info.tag, "cp311");
  });

  it("explains a missing interpreter", () => {
    const r = S.parsePreflight(
      { spawnError: { code: "ENOENT", message: "spawn python3 ENOENT" }, exitCode: null, stdout: "", stderr: "" },
      read(),
      py,
    );
    assert.equal(r.ok, false);
    assert.match((r as { message: string }).message, /`python3` \(the default\) was not found/);
  });

  it("explains an old Python", () => {
    const r = S.parsePreflight(ok({ executable: "/usr/bin/python3.8", version: "3.8.10", error: "python-version" }), read(), {
      command: ["/usr/bin/python3.8"],
      source: "setting",
    });
    assert.equal(r.ok, false);
    assert.match((r as { message: string }).message, /needs Python 3\.10 or newer.*3\.8\.10.*gradguard\.interpreter/);
  });

  it("tells how to install gradguard with fromEnvironment", () => {
    const s = read({ importStrategy: { globalValue: "fromEnvironment" } });
    const r = S.parsePreflight(
      ok({ executable: "/v/bin/python", version: "3.12.1", error: "import", detail: "ModuleNotFoundError: No module named 'gradguard'" }),
      s,
      { command: ["/v/bin/python"], source: "python-extension" },
    );
    assert.equal(r.ok, false);
    const m = (r as { message: string }).message;
    assert.match(m, /not installed in the environment of `\/v\/bin\/python` \(selected in the Python extension\)/);
    assert.match(m, /pip install \/path\/to\/gradguard/);
    assert.doesNotMatch(m, /pip install gradguard/); // not on PyPI
    assert.match(m, /useBundled/);
  });

  it("reports a bundled import failure with its cause", () => {
    const r = S.parsePreflight(
      ok({ executable: "/p", version: "3.13.0", error: "import", detail: "ImportError: bad magic" }),
      read(),
      py,
    );
    assert.match((r as { message: string }).message, /bundled with the extension does not import.*ImportError: bad magic/);
  });

  it("copes with an interpreter that is not Python 3 at all", () => {
    const r = S.parsePreflight({ exitCode: 1, stdout: "", stderr: "  File \"<string>\", line 2\nSyntaxError: invalid syntax\n" }, read(), py);
    assert.equal(r.ok, false);
    assert.match((r as { message: string }).message, /did not run as a Python 3 interpreter \(exit code 1\)/);
    assert.match((r as { detail?: string }).detail ?? "", /SyntaxError/);
  });
});

describe("libcst: the bundled build for the interpreter, else one clear message", () => {
  const bundle: S.LibcstBundle = { target: "linux-x64", libcst: "1.9.0", tags: ["cp310", "cp311", "cp312", "cp313", "cp314"] };
  const py: S.Interpreter = { command: ["/venv/bin/python"], source: "setting" };
  const info = (over: Partial<S.PreflightInfo> = {}): S.PreflightInfo => ({
    executable: "/venv/bin/python",
    version: "3.11.7",
    gradguard: "0.1.0",
    location: "/ext/libs/gradguard",
    implementation: "cpython",
    tag: "cp311",
    platform: "linux x86_64",
    libcst: { source: "bundled", version: "1.9.0", path: "/ext/vscode-client/bundled/libcst/cp311" },
    ...over,
  });
  const libcstCtx = { ...ctx, bundledLibcst: "/ext/vscode-client/bundled/libcst", env: { ...ctx.env, PYTHONPATH: "/mine" } };

  it("puts the chosen bundled libcst right after the bundled libs, before the user's PYTHONPATH", () => {
    const l = S.serverLaunch(read(), py, libcstCtx, info());
    assert.equal(l.env.PYTHONPATH, "/ext/vscode-client/bundled/libs:/ext/vscode-client/bundled/libcst/cp311:/mine");
    assert.equal(l.env.GRADGUARD_BUNDLED_LIBCST, "/ext/vscode-client/bundled/libcst");
  });

  it("adds nothing when libcst comes from the environment, or with fromEnvironment", () => {
    const env = info({ libcst: { source: "environment", version: "1.8.0" } });
    assert.equal(S.serverLaunch(read(), py, libcstCtx, env).env.PYTHONPATH, "/ext/vscode-client/bundled/libs:/mine");
    const fromEnv = S.serverLaunch(read({ importStrategy: { globalValue: "fromEnvironment" } }), py, libcstCtx, info());
    assert.equal(fromEnv.env.PYTHONPATH, "/mine");
    assert.equal(fromEnv.env.GRADGUARD_BUNDLED_LIBCST, undefined);
  });

  it("says nothing when libcst loads", () => {
    assert.equal(S.libcstNotice(info(), bundle, py), undefined);
    assert.equal(S.libcstNotice(info({ libcst: { source: "environment" } }), undefined, py), undefined);
  });

  it("names the interpreter, the bundled versions and both ways out when none matches", () => {
    const m = S.libcstNotice(info({ version: "3.14.0", tag: "cp314t", libcst: { source: null, error: "ModuleNotFoundError" } }), bundle, py);
    assert.ok(m);
    assert.match(m, /quick fixes are off/);
    assert.match(m, /`\/venv\/bin\/python` \(from the gradguard\.interpreter setting\) \(CPython 3\.14\.0 \(free-threaded\), linux x86_64\)/);
    assert.match(m, /bundles libcst 1\.9\.0 only for CPython 3\.10, 3\.11, 3\.12, 3\.13, 3\.14 on linux-x64/);
    assert.match(m, /`\/venv\/bin\/python -m pip install libcst`/);
    const pypy = S.libcstNotice(info({ implementation: "pypy", tag: "pypy", libcst: { source: null } }), bundle, py);
    assert.match(pypy ?? "", /\(pypy 3\.11\.7, linux x86_64\)/);
  });

  it("reports a bundled build that does not load, and the universal .vsix", () => {
    const broken = info({ libcst: { source: null, bundledError: "ImportError: wrong ELF class" } });
    assert.match(S.libcstNotice(broken, bundle, py) ?? "", /bundled for CPython 3\.11 on linux-x64 failed to load \(ImportError: wrong ELF class\)/);
    const universal = S.libcstNotice(info({ libcst: { source: null } }), undefined, py) ?? "";
    assert.match(universal, /universal build, which bundles no libcst.*pip install libcst/);
  });
});

describe("changeEffect", () => {
  const only = (...keys: string[]) => (k: string) => keys.includes(k);
  it("restarts for process-level settings and only reconfigures for rule settings", () => {
    assert.equal(S.changeEffect(only("gradguard.interpreter")), "restart");
    assert.equal(S.changeEffect(only("gradguard.importStrategy")), "restart");
    assert.equal(S.changeEffect(only("gradguard.run")), "restart");
    assert.equal(S.changeEffect(only("gradguard.severity")), "configuration");
    assert.equal(S.changeEffect(only("gradguard.probe")), "configuration");
    assert.equal(S.changeEffect(only("gradguard.diagnosticMode")), "configuration");
    assert.equal(S.changeEffect(only("gradguard.trace")), "none");
    assert.equal(S.changeEffect(only("editor.fontSize")), "none");
  });
});

describe("CrashWindow", () => {
  it("allows three restarts within three minutes, then stops", () => {
    const w = new S.CrashWindow(3, 180_000);
    assert.equal(w.crashed(0), true);
    assert.equal(w.crashed(1000), true);
    assert.equal(w.crashed(2000), true);
    assert.equal(w.crashed(3000), false);
  });
  it("forgets crashes older than the window", () => {
    const w = new S.CrashWindow(3, 180_000);
    for (const t of [0, 1, 2]) w.crashed(t);
    assert.equal(w.crashed(200_000), true);
  });
});

describe("PREFLIGHT_SCRIPT on a real interpreter", () => {
  const python = process.env.PYTHON || "python3";
  const run = async (pythonPath: string): Promise<S.PreflightRun> => {
    const { execFile } = await import("node:child_process");
    const { tmpdir } = await import("node:os");
    return new Promise((resolve) => {
      // -S: no site-packages, so only PYTHONPATH and the standard library are importable
      execFile(python, ["-S", "-c", S.PREFLIGHT_SCRIPT], { cwd: tmpdir(), env: { PYTHONPATH: pythonPath } }, (err, stdout, stderr) =>
        resolve({ exitCode: err ? 1 : 0, stdout, stderr }),
      );
    });
  };
  const interp: S.Interpreter = { command: [python, "-S"], source: "setting" };

  it("reports a missing gradguard as an import error", async () => {
    const r = S.parsePreflight(await run(""), read({ importStrategy: { globalValue: "fromEnvironment" } }), interp);
    assert.equal(r.ok, false);
    assert.match((r as { message: string }).message, /No module named 'gradguard'/);
  });

  it("picks the bundled libcst folder of the interpreter's tag, and reports one that does not load", async () => {
    const { mkdtempSync, mkdirSync, writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const { execFile } = await import("node:child_process");
    const root = mkdtempSync(join(tmpdir(), "gg-libcst-"));
    const [tagOf, suffix] = await new Promise<string[]>((resolve) =>
      execFile(python, ["-c", "import sys, sysconfig; print('cp%d%d' % sys.version_info[:2], sysconfig.get_config_var('EXT_SUFFIX'))"],
        (_e, out) => resolve(out.trim().split(" "))),
    );
    // a libcst whose compiled parser is not a library this interpreter can load (as one built for another platform)
    mkdirSync(join(root, tagOf, "libcst"), { recursive: true });
    writeFileSync(join(root, tagOf, "libcst", "__init__.py"), "");
    writeFileSync(join(root, tagOf, "libcst", `native${suffix}`), "simulated: not a shared library of this platform\n");
    const r = await new Promise<S.PreflightRun>((resolve) =>
      execFile(python, ["-S", "-c", S.PREFLIGHT_SCRIPT], { cwd: tmpdir(), env: { GRADGUARD_BUNDLED_LIBCST: root } }, (err, stdout, stderr) =>
        resolve({ exitCode: err ? 1 : 0, stdout, stderr }),
      ),
    );
    const line = r.stdout.split("\n").find((l) => l.startsWith("GRADGUARD-PREFLIGHT "));
    const parsed = JSON.parse(line!.slice("GRADGUARD-PREFLIGHT ".length));
    assert.equal(parsed.tag.replace(/t$/, ""), tagOf);
    assert.equal(parsed.libcst.source, null); // -S: no environment libcst either
    assert.match(parsed.libcst.bundledError, /^ImportError: .*native/);
  });

  it("reports what the server lacks when gradguard is there without its dependencies", async () => {
    const { join } = await import("node:path");
    const server = join(__dirname, "..", "..", "..", "server");
    const r = S.parsePreflight(await run(server), read(), interp);
    assert.equal(r.ok, false);
    // the first third-party module gradguard.lsp.server imports (pygls, lsprotocol, attrs, ...)
    assert.match((r as { message: string }).message, /does not import with .*ModuleNotFoundError: No module named '\w+'/);
  });
});
