// Settings -> server command line, environment and options.
//
// Pure: no `vscode` import, so node's test runner exercises all of it (test/settings.test.ts).
// extension.ts feeds it `WorkspaceConfiguration.inspect` results and the workspace trust state.

export type ImportStrategy = "useBundled" | "fromEnvironment";
export type RunMode = "onType" | "onSave";
export type DiagnosticMode = "openFiles" | "workspace";
export type Severity = "error" | "warning" | "info";
export type ProbeDevice = "cpu" | "cuda" | "auto";
export type LogLevel = "error" | "warning" | "info" | "debug";

/** The subset of `vscode.WorkspaceConfiguration.inspect()` that is read (language overrides are not used). */
export interface Inspected<T> {
  defaultValue?: T;
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
}

/** `key` is relative to the `gradguard` section, e.g. "probe.enable". */
export type Inspector = (key: string) => Inspected<unknown> | undefined;

export interface ProbeSettings {
  enable: boolean;
  device: ProbeDevice;
  timeout: number;
}

export interface ExtensionSettings {
  interpreter: string[]; // empty: the Python extension's interpreter, else python3
  importStrategy: ImportStrategy;
  args: string[];
  select?: string[]; // undefined: not set in VS Code, pyproject.toml decides
  ignore?: string[];
  severity: Record<string, Severity>;
  run: RunMode;
  diagnosticMode: DiagnosticMode;
  probe: ProbeSettings;
  logLevel: LogLevel;
}

/** Settings whose workspace values are ignored in an untrusted workspace (package.json `restrictedConfigurations`). */
export const RESTRICTED = ["interpreter", "importStrategy", "args", "probe.enable", "probe.device", "probe.timeout"];

export const DEFAULTS: ExtensionSettings = {
  interpreter: [],
  importStrategy: "useBundled",
  args: [],
  severity: {},
  run: "onType",
  diagnosticMode: "openFiles",
  probe: { enable: false, device: "cpu", timeout: 10 },
  logLevel: "warning",
};

const SEVERITIES: readonly string[] = ["error", "warning", "info"];
const RULE_CODE = /^GG\d{3}$/;

export interface ReadResult {
  settings: ExtensionSettings;
  warnings: string[]; // invalid values that were replaced by defaults, for the output channel
}

/**
 * Read every gradguard setting.  Workspace-folder values override workspace values, which
 * override user values.  In an untrusted workspace the RESTRICTED keys only take user values
 * and the probe is always off.
 */
export function readSettings(inspect: Inspector, trusted: boolean): ReadResult {
  const warnings: string[] = [];
  const layers = (key: string): unknown[] => {
    const i = inspect(key) ?? {};
    const userOnly = !trusted && RESTRICTED.includes(key);
    // lowest precedence first
    return userOnly ? [i.globalValue] : [i.globalValue, i.workspaceValue, i.workspaceFolderValue];
  };
  const value = (key: string): unknown => {
    let v: unknown;
    for (const layer of layers(key)) if (layer !== undefined && layer !== null) v = layer;
    return v;
  };
  const isSet = (key: string) => layers(key).some((v) => v !== undefined && v !== null);

  const strings = (key: string, fallback: string[]): string[] => {
    const v = value(key);
    if (v === undefined) return fallback;
    if (!Array.isArray(v) || !v.every((s) => typeof s === "string")) {
      warnings.push(`gradguard.${key} must be a list of strings; ignoring ${JSON.stringify(v)}`);
      return fallback;
    }
    return v.map((s) => s.trim()).filter((s) => s.length > 0);
  };
  const oneOf = <T extends string>(key: string, allowed: readonly T[], fallback: T): T => {
    const v = value(key);
    if (v === undefined) return fallback;
    if (typeof v === "string" && (allowed as readonly string[]).includes(v)) return v as T;
    warnings.push(`gradguard.${key} must be one of ${allowed.join(", ")}; ignoring ${JSON.stringify(v)}`);
    return fallback;
  };

  // Object settings merge across levels, like VS Code's own `get` does.
  const severity: Record<string, Severity> = {};
  for (const layer of layers("severity")) {
    if (layer === undefined || layer === null) continue;
    if (typeof layer !== "object" || Array.isArray(layer)) {
      warnings.push(`gradguard.severity must map rule codes to error|warning|info; ignoring ${JSON.stringify(layer)}`);
      continue;
    }
    for (const [code, sev] of Object.entries(layer as Record<string, unknown>)) {
      const c = code.trim().toUpperCase();
      const s = typeof sev === "string" ? sev.toLowerCase() : sev;
      if (!RULE_CODE.test(c) || typeof s !== "string" || !SEVERITIES.includes(s)) {
        warnings.push(`gradguard.severity: ignoring ${JSON.stringify(code)}: ${JSON.stringify(sev)}`);
        continue;
      }
      severity[c] = s as Severity;
    }
  }

  let timeout = value("probe.timeout");
  if (timeout !== undefined && (typeof timeout !== "number" || !(timeout > 0) || !Number.isFinite(timeout))) {
    warnings.push(`gradguard.probe.timeout must be a positive number of seconds; ignoring ${JSON.stringify(timeout)}`);
    timeout = undefined;
  }
  const enable = value("probe.enable");

  const settings: ExtensionSettings = {
    interpreter: strings("interpreter", DEFAULTS.interpreter),
    importStrategy: oneOf<ImportStrategy>("importStrategy", ["useBundled", "fromEnvironment"], DEFAULTS.importStrategy),
    args: strings("args", DEFAULTS.args),
    severity,
    run: oneOf<RunMode>("run", ["onType", "onSave"], DEFAULTS.run),
    diagnosticMode: oneOf<DiagnosticMode>("diagnosticMode", ["openFiles", "workspace"], DEFAULTS.diagnosticMode),
    probe: {
      enable: trusted && enable === true,
      device: oneOf<ProbeDevice>("probe.device", ["cpu", "cuda", "auto"], DEFAULTS.probe.device),
      timeout: (timeout as number | undefined) ?? DEFAULTS.probe.timeout,
    },
    logLevel: oneOf<LogLevel>("logLevel", ["error", "warning", "info", "debug"], DEFAULTS.logLevel),
  };
  if (isSet("select")) settings.select = strings("select", []);
  if (isSet("ignore")) settings.ignore = strings("ignore", []);
  return { settings, warnings };
}

/**
 * The settings object the server gets as `initializationOptions` and in
 * `workspace/didChangeConfiguration`.  The server reads `gradguard` (the keys of
 * `[tool.gradguard]`; it rejects unknown keys, so only those go there): `select`/`ignore` replace
 * pyproject's when present, `severity` entries are merged over it.  `run`, `diagnosticMode`, `probe`
 * and `trusted` sit beside it for the server features that read them (workspace mode, the runtime probe).
 */
export function serverSettings(s: ExtensionSettings, trusted: boolean): Record<string, unknown> {
  const gradguard: Record<string, unknown> = {};
  if (s.select !== undefined) gradguard.select = s.select;
  if (s.ignore !== undefined) gradguard.ignore = s.ignore;
  if (Object.keys(s.severity).length > 0) gradguard.severity = s.severity;
  return {
    gradguard,
    run: s.run,
    diagnosticMode: s.diagnosticMode,
    probe: { ...s.probe, enable: trusted && s.probe.enable },
    trusted,
  };
}

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  command: string[]; // executable followed by its own arguments
  source: InterpreterSource;
}

/**
 * Which Python runs the server: `gradguard.interpreter` when set (the convention of Microsoft's
 * Python-tool extensions: an explicit setting wins), else the interpreter selected in the
 * Python extension (`fromPythonExtension`; the caller passes undefined in an untrusted workspace,
 * where that interpreter may live inside the workspace), else `python3` (`python` on Windows).
 */
export function resolveInterpreter(
  s: ExtensionSettings,
  fromPythonExtension: string[] | undefined,
  platform: string,
): Interpreter {
  if (s.interpreter.length > 0) return { command: s.interpreter, source: "setting" };
  if (fromPythonExtension && fromPythonExtension.length > 0) {
    return { command: fromPythonExtension, source: "python-extension" };
  }
  return { command: [platform === "win32" ? "python" : "python3"], source: "default" };
}

export interface LaunchContext {
  bundledLibs: string; // <extension>/vscode-client/bundled/libs
  bundledLibcst?: string; // <extension>/vscode-client/bundled/libcst (platform-specific .vsix only)
  cwd: string; // a directory with no Python packages in it: `python -m` puts the cwd first on sys.path
  env: Record<string, string | undefined>; // the extension host's environment
  pathDelimiter: string; // ":" or ";"
}

export interface Launch {
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

const LOG_LEVELS: Record<LogLevel, string> = { error: "ERROR", warning: "WARNING", info: "INFO", debug: "DEBUG" };

/**
 * The environment the server (and the preflight check) runs with.  `libcstPath`: the bundled libcst
 * folder the preflight chose for this interpreter (useBundled only), put right after the bundled libs.
 */
export function serverEnv(s: ExtensionSettings, ctx: LaunchContext, libcstPath?: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(ctx.env)) if (v !== undefined) env[k] = v;
  delete env.GRADGUARD_BUNDLED_LIBCST;
  if (s.importStrategy === "useBundled") {
    // first on sys.path after the cwd, so the bundled gradguard and its dependencies win
    const first = libcstPath ? [ctx.bundledLibs, libcstPath] : [ctx.bundledLibs];
    if (ctx.env.PYTHONPATH) first.push(ctx.env.PYTHONPATH);
    env.PYTHONPATH = first.join(ctx.pathDelimiter);
    if (ctx.bundledLibcst) env.GRADGUARD_BUNDLED_LIBCST = ctx.bundledLibcst; // read by the preflight script
  }
  env.GRADGUARD_LOG_LEVEL = LOG_LEVELS[s.logLevel];
  env.GRADGUARD_IMPORT_STRATEGY = s.importStrategy;
  return env;
}

/** `python -m gradguard.lsp ARGS`, stdio. */
export function serverLaunch(
  s: ExtensionSettings,
  interpreter: Interpreter,
  ctx: LaunchContext,
  info?: PreflightInfo,
): Launch {
  const [command, ...interpreterArgs] = interpreter.command;
  const libcstPath = info?.libcst.source === "bundled" ? info.libcst.path : undefined;
  return {
    command,
    args: [...interpreterArgs, "-m", "gradguard.lsp", ...s.args],
    cwd: ctx.cwd,
    env: serverEnv(s, ctx, libcstPath),
  };
}

/**
 * Run by the same interpreter, environment and cwd before the server starts: it reports the
 * Python version and whether `gradguard.lsp.server` (and so pygls, lsprotocol, ...) imports,
 * as one JSON line.  Written to parse on any Python 3, so an old interpreter gets a clear
 * message instead of a syntax error.
 */
export const PREFLIGHT_SCRIPT = [
  "import json, os, platform, sys, sysconfig",
  "r = {'executable': sys.executable, 'version': '%d.%d.%d' % tuple(sys.version_info[:3])}",
  "impl = sys.implementation.name",
  "ft = 't' if sysconfig.get_config_var('Py_GIL_DISABLED') else ''",
  "r['implementation'] = impl",
  "r['tag'] = 'cp%d%d%s' % (sys.version_info[0], sys.version_info[1], ft) if impl == 'cpython' else impl",
  "r['platform'] = '%s %s' % (sys.platform, platform.machine())",
  // libcst in `where` (a folder list; None: sys.path) whose compiled parser loads in this interpreter.  Only
  // libcst.native is loaded (dlopen + init: a wrong platform or ABI fails here), not the package (~0.4 s).
  "def cst(where=None):",
  "    import importlib.machinery as M, importlib.util as U, re",
  "    spec = M.PathFinder.find_spec('libcst', where)",
  "    if spec is None or not spec.submodule_search_locations:",
  "        raise ImportError(\"No module named 'libcst'\")",
  "    pkg = list(spec.submodule_search_locations)[0]",
  "    n = M.PathFinder.find_spec('native', [pkg])",
  "    if n is None or not isinstance(n.loader, M.ExtensionFileLoader):",
  "        raise ImportError('%s has no libcst.native for %s' % (pkg, sys.implementation.cache_tag))",
  "    U.module_from_spec(U.spec_from_file_location('libcst.native', n.origin))",
  "    try:",
  "        with open(os.path.join(pkg, '_version.py')) as f:",
  "            v = re.search(r'(?m)^__version__\\s*=[^\"\\'\\n]*[\"\\']([^\"\\']+)', f.read()).group(1)",
  "    except Exception:",
  "        v = '?'",
  "    return {'version': v, 'location': pkg}",
  "if sys.version_info < (3, 10):",
  "    r['error'] = 'python-version'",
  "else:",
  "    try:",
  "        import gradguard, gradguard.lsp.server",
  "        r['gradguard'] = getattr(gradguard, '__version__', '?')",
  "        r['location'] = os.path.dirname(os.path.abspath(gradguard.__file__))",
  "    except BaseException as e:",
  "        r['error'] = 'import'",
  "        r['detail'] = '%s: %s' % (type(e).__name__, e)",
  // libcst (the fixes): the extension's build for this interpreter's tag first, else the environment's
  "    c = {'source': None}",
  "    root = os.environ.get('GRADGUARD_BUNDLED_LIBCST')",
  "    d = os.path.join(root, r['tag']) if root else None",
  "    if d and os.path.isdir(d):",
  "        try:",
  "            c = dict(cst([d]), source='bundled', path=d)",
  "        except BaseException as e:",
  "            c['bundledError'] = '%s: %s' % (type(e).__name__, e)",
  "    if c['source'] is None:",
  "        try:",
  "            c.update(cst(), source='environment')",
  "        except BaseException as e:",
  "            c['error'] = '%s: %s' % (type(e).__name__, e)",
  "    r['libcst'] = c",
  "print('GRADGUARD-PREFLIGHT ' + json.dumps(r))",
].join("\n");

export function preflightLaunch(s: ExtensionSettings, interpreter: Interpreter, ctx: LaunchContext): Launch {
  const [command, ...interpreterArgs] = interpreter.command;
  return { command, args: [...interpreterArgs, "-c", PREFLIGHT_SCRIPT], cwd: ctx.cwd, env: serverEnv(s, ctx) };
}

/** Where the server's libcst (which the quick fixes need) comes from; source null: nowhere. */
export interface LibcstInfo {
  source: "bundled" | "environment" | null;
  version?: string;
  location?: string; // the libcst package folder
  path?: string; // bundled: the folder put on PYTHONPATH (bundled/libcst/<tag>)
  bundledError?: string; // the bundled build for this tag exists but did not load
  error?: string; // why the environment's libcst did not import
}

export interface PreflightInfo {
  executable: string;
  version: string;
  gradguard: string;
  location: string;
  implementation: string; // sys.implementation.name
  tag: string; // cp311, cp314t, pypy, ...
  platform: string; // "linux x86_64"
  libcst: LibcstInfo;
}

/** bundled/libcst/TARGET.json, written by scripts/bundle_libcst.py into a platform-specific .vsix. */
export interface LibcstBundle {
  target: string; // linux-x64, darwin-arm64, ...
  libcst: string;
  tags: string[]; // cp310, cp311, ...
}

function describeTag(tag: string): string {
  const m = /^cp(\d)(\d+)(t?)$/.exec(tag);
  return m ? `CPython ${m[1]}.${m[2]}${m[3]}` : tag;
}

/**
 * One message when the quick fixes are off because no libcst loads in the interpreter, naming the
 * interpreter and how to fix it (undefined when libcst is there).  `bundle`: what the .vsix carries
 * (undefined: the universal .vsix, which has no libcst).
 */
export function libcstNotice(info: PreflightInfo, bundle: LibcstBundle | undefined, interpreter: Interpreter): string | undefined {
  if (info.libcst.source !== null) return undefined;
  const who = describeInterpreter(interpreter);
  const what = `${info.implementation === "cpython" ? "CPython" : info.implementation} ${info.version}` +
    `${info.tag.endsWith("t") && info.implementation === "cpython" ? " (free-threaded)" : ""}, ${info.platform}`;
  const install = `\`${info.executable} -m pip install libcst\``;
  const start = "gradguard's quick fixes are off: libcst (which builds them) does not load in";
  let why: string;
  if (!bundle) {
    why = "and this gradguard extension is the universal build, which bundles no libcst. " +
      "Install the build for your platform (e.g. gradguard-linux-x64.vsix)";
  } else if (info.libcst.bundledError) {
    why = `and the libcst ${bundle.libcst} bundled for ${describeTag(info.tag)} on ${bundle.target} failed to load ` +
      `(${info.libcst.bundledError}); is the interpreter built for another platform? ` +
      `Select a ${bundle.target} CPython ${bundle.tags.map(describeTag).map((t) => t.replace("CPython ", "")).join(", ")}`;
  } else {
    why = `and this extension bundles libcst ${bundle.libcst} only for ` +
      `${bundle.tags.map(describeTag).join(", ").replace(/, CPython /g, ", ")} on ${bundle.target}. ` +
      "Select one of those interpreters (the Python extension or gradguard.interpreter)";
  }
  return `${start} ${who} (${what}), ${why}, or install libcst into it: ${install}. Findings and "Suppress" still work.`;
}

export type Preflight = { ok: true; info: PreflightInfo } | { ok: false; message: string; detail?: string };

/** How the preflight process ended. `spawnError` is set when it could not start at all. */
export interface PreflightRun {
  spawnError?: { code?: string; message: string };
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export function describeInterpreter(interpreter: Interpreter): string {
  const shown = interpreter.command.join(" ");
  const from = {
    setting: "from the gradguard.interpreter setting",
    "python-extension": "selected in the Python extension",
    default: "the default",
  }[interpreter.source];
  return `\`${shown}\` (${from})`;
}

/** Turn the preflight run into either the server's facts or one clear message for the user. */
export function parsePreflight(run: PreflightRun, s: ExtensionSettings, interpreter: Interpreter): Preflight {
  const who = describeInterpreter(interpreter);
  const choose =
    interpreter.source === "setting"
      ? "Fix the gradguard.interpreter setting"
      : "Select a Python 3.10+ interpreter in the Python extension or set gradguard.interpreter";
  if (run.spawnError) {
    const missing = run.spawnError.code === "ENOENT";
    return {
      ok: false,
      message: missing
        ? `gradguard cannot start: the Python interpreter ${who} was not found. ${choose}.`
        : `gradguard cannot start the Python interpreter ${who}: ${run.spawnError.message}`,
    };
  }
  const line = run.stdout.split(/\r?\n/).find((l) => l.startsWith("GRADGUARD-PREFLIGHT "));
  let r: Record<string, string> | undefined;
  try {
    r = line ? JSON.parse(line.slice("GRADGUARD-PREFLIGHT ".length)) : undefined;
  } catch {
    r = undefined;
  }
  if (!r) {
    const tail = (run.stderr || run.stdout).trim().split(/\r?\n/).slice(-3).join(" | ");
    return {
      ok: false,
      message: `gradguard cannot start: ${who} did not run as a Python 3 interpreter (exit code ${run.exitCode}). ${choose}.`,
      detail: tail || undefined,
    };
  }
  if (r.error === "python-version") {
    return {
      ok: false,
      message: `gradguard needs Python 3.10 or newer, but ${who} is Python ${r.version}. ${choose}.`,
    };
  }
  if (r.error === "import") {
    if (s.importStrategy === "fromEnvironment") {
      return {
        ok: false,
        message:
          `gradguard is not installed in the environment of ${who} (${r.detail}). ` +
          // gradguard is not on PyPI (yet): `pip install gradguard` would find nothing, or someone else's package
          `Install it there from a gradguard checkout (\`python -m pip install /path/to/gradguard\`), ` +
          `or set gradguard.importStrategy to "useBundled".`,
        detail: r.detail,
      };
    }
    return {
      ok: false,
      message: `The gradguard bundled with the extension does not import with ${who} (Python ${r.version}): ${r.detail}`,
      detail: r.detail,
    };
  }
  const libcst = (r.libcst as unknown as LibcstInfo | undefined) ?? { source: null, error: "not reported" };
  return {
    ok: true,
    info: {
      executable: r.executable,
      version: r.version,
      gradguard: r.gradguard,
      location: r.location,
      implementation: r.implementation ?? "cpython",
      tag: r.tag ?? "?",
      platform: r.platform ?? "?",
      libcst,
    },
  };
}

/** Which setting changes need the server restarted, and which only a new configuration. */
export function changeEffect(affects: (key: string) => boolean): "restart" | "configuration" | "none" {
  const restart = ["interpreter", "importStrategy", "args", "logLevel", "run"];
  if (restart.some((k) => affects(`gradguard.${k}`))) return "restart";
  const config = ["select", "ignore", "severity", "probe", "diagnosticMode"];
  if (config.some((k) => affects(`gradguard.${k}`))) return "configuration";
  return "none";
}

/**
 * Restart policy after the server process dies: restart it at most `max` times within
 * `windowMs`; past that stay stopped and say so (no crash loop).
 */
export class CrashWindow {
  private crashes: number[] = [];
  constructor(
    private readonly max = 3,
    private readonly windowMs = 3 * 60 * 1000,
  ) {}
  /** Record a crash at `now`; true when the server may be restarted. */
  crashed(now: number): boolean {
    this.crashes = this.crashes.filter((t) => now - t < this.windowMs);
    this.crashes.push(now);
    return this.crashes.length <= this.max;
  }
  reset(): void {
    this.crashes = [];
  }
}
