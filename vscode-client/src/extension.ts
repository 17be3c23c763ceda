// gradguard for VS Code: starts `python -m gradguard.lsp` and connects vscode-languageclient to it.
import { execFile } from "child_process";
import * as fs from "fs";
import * as os from "os";
import * as path from "path";
import * as readline from "readline";
import * as vscode from "vscode";
import {
  CloseAction,
  DiagnosticCollectionProvider,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  LanguageClientOptions,
  MessageType,
  RevealOutputChannelOn,
  ServerOptions,
  ShowMessageNotification,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { interpreterFromPythonExtension, onPythonInterpreterChanged, pythonExtensionInstalled } from "./python";
import * as S from "./settings";

const ID = "gradguard";
const NAME = "gradguard";

export type ServerState = "starting" | "running" | "stopped" | "error";

export interface ServerInfo extends S.PreflightInfo {
  command: string[];
  interpreterSource: S.InterpreterSource;
  importStrategy: S.ImportStrategy;
  trusted: boolean;
}

/** What `activate` returns: read by the end-to-end test's driver extension, usable by others. */
export interface GradguardApi {
  readonly state: ServerState;
  readonly server: ServerInfo | undefined;
  readonly lastError: string | undefined;
  /** The warning shown when the quick fixes are off (no libcst loads in the interpreter), else undefined. */
  readonly notice: string | undefined;
  /** Resolves once the start or restart under way (if any) has finished. */
  whenIdle(): Promise<ServerState>;
}

/**
 * Push (`publishDiagnostics`) and pull (`textDocument/diagnostic`) write into one collection, so
 * a server that answers both never shows a finding twice; each model replaces the file's list.
 */
class SharedDiagnostics implements DiagnosticCollectionProvider {
  private collection: vscode.DiagnosticCollection | undefined;
  private users = 0;
  create(name: string | undefined): vscode.DiagnosticCollection {
    this.collection ??= vscode.languages.createDiagnosticCollection(name ?? ID);
    this.users += 1;
    return this.collection;
  }
  dispose(collection: vscode.DiagnosticCollection): void {
    this.users -= 1;
    if (this.users <= 0 && collection === this.collection) {
      collection.dispose();
      this.collection = undefined;
      this.users = 0;
    }
  }
}

function runPreflight(launch: S.Launch): Promise<S.PreflightRun> {
  return new Promise((resolve) => {
    execFile(
      launch.command,
      launch.args,
      { cwd: launch.cwd, env: launch.env, timeout: 60_000, maxBuffer: 1 << 20, windowsHide: true },
      (error, stdout, stderr) => {
        const err = error as (NodeJS.ErrnoException & { code?: string | number }) | null;
        if (err && typeof err.code === "string") {
          resolve({ spawnError: { code: err.code, message: err.message }, exitCode: null, stdout, stderr });
        } else {
          resolve({ exitCode: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
        }
      },
    );
  });
}

class Controller implements GradguardApi {
  state: ServerState = "stopped";
  server: ServerInfo | undefined;
  lastError: string | undefined;
  private client: LanguageClient | undefined;
  private settings: S.ExtensionSettings = S.DEFAULTS;
  private readonly crashes = new S.CrashWindow();
  private readonly status: vscode.StatusBarItem;
  private queue: Promise<void> = Promise.resolve();
  private stopping = false;
  private readonly diagnostics = new SharedDiagnostics();
  private serverOutput: string[] = []; // the server's last stderr lines, for error messages
  private libcstNotice: string | undefined; // why the quick fixes are off (no libcst for the interpreter)
  private readonly noticesShown = new Set<string>(); // each such message once per window

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.status = vscode.window.createStatusBarItem("gradguard.status", vscode.StatusBarAlignment.Right, 100);
    this.status.name = "gradguard";
    this.status.command = "gradguard.showLogs";
    context.subscriptions.push(this.status);
    this.render();
    this.status.show();
  }

  whenIdle(): Promise<ServerState> {
    return this.queue.then(() => this.state);
  }

  get notice(): string | undefined {
    return this.libcstNotice;
  }

  private get trusted(): boolean {
    return vscode.workspace.isTrusted;
  }

  private get resource(): vscode.Uri | undefined {
    return vscode.workspace.workspaceFolders?.[0]?.uri;
  }

  readSettings(): S.ExtensionSettings {
    const cfg = vscode.workspace.getConfiguration(ID, this.resource);
    const { settings, warnings } = S.readSettings((key) => cfg.inspect(key), this.trusted);
    for (const w of warnings) this.log.warn(w);
    this.settings = settings;
    return settings;
  }

  /** Serialised: a restart requested while one runs waits for it. */
  restart(reason: string): Promise<void> {
    this.queue = this.queue.then(() => this.doRestart(reason)).catch((e) => this.fail(`gradguard: ${e}`));
    return this.queue;
  }

  stop(): Promise<void> {
    this.queue = this.queue.then(() => this.doStop()).catch((e) => this.log.warn(`stopping the server: ${e}`));
    return this.queue;
  }

  /** The settings that only need the server told, not restarted. */
  async sendConfiguration(): Promise<void> {
    const s = this.readSettings();
    if (this.client?.isRunning()) {
      await this.client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: S.serverSettings(s, this.trusted),
      });
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      this.stopping = true;
      try {
        await client.stop(5000);
      } catch (e) {
        this.log.warn(`stopping the server: ${e}`);
      } finally {
        this.stopping = false;
        await client.dispose().catch(() => undefined);
      }
    }
    this.state = "stopped";
    this.server = undefined;
    this.render();
  }

  private async doRestart(reason: string): Promise<void> {
    await this.doStop();
    this.crashes.reset();
    this.lastError = undefined;
    this.state = "starting";
    this.render();
    const s = this.readSettings();
    const trusted = this.trusted;
    this.log.info(`starting the server (${reason}); workspace ${trusted ? "trusted" : "not trusted: restricted mode"}`);

    let fromPython: string[] | undefined;
    if (trusted && s.interpreter.length === 0) {
      fromPython = await interpreterFromPythonExtension(this.resource, this.log);
    }
    const interpreter = S.resolveInterpreter(s, fromPython, process.platform);
    const bundled = this.context.asAbsolutePath(path.join("vscode-client", "bundled"));
    const bundledLibs = path.join(bundled, "libs");
    // libcst for the quick fixes: one folder per CPython tag in a platform-specific .vsix, none in the universal one
    const bundledLibcst = path.join(bundled, "libcst");
    const libcstBundle = readLibcstBundle(bundledLibcst, this.log);
    if (s.importStrategy === "useBundled" && !fs.existsSync(path.join(bundledLibs, "gradguard"))) {
      return this.fail(
        `The extension's bundled gradguard is missing (${bundledLibs}). ` +
          `Set gradguard.importStrategy to "fromEnvironment", or reinstall the extension.`,
      );
    }
    const ctx: S.LaunchContext = {
      bundledLibs,
      bundledLibcst: libcstBundle ? bundledLibcst : undefined,
      cwd: fs.existsSync(bundled) ? bundled : os.tmpdir(),
      env: process.env,
      pathDelimiter: path.delimiter,
    };

    const check = S.preflightLaunch(s, interpreter, ctx);
    const preflight = S.parsePreflight(await runPreflight(check), s, interpreter);
    if (!preflight.ok) {
      if (preflight.detail) this.log.error(preflight.detail);
      return this.fail(preflight.message);
    }
    this.server = {
      ...preflight.info,
      command: interpreter.command,
      interpreterSource: interpreter.source,
      importStrategy: s.importStrategy,
      trusted,
    };
    this.log.info(
      `gradguard ${preflight.info.gradguard} from ${preflight.info.location}, ` +
        `Python ${preflight.info.version} (${preflight.info.executable}, ${interpreter.source})`,
    );
    const cst = preflight.info.libcst;
    this.libcstNotice = s.importStrategy === "useBundled" ? S.libcstNotice(preflight.info, libcstBundle, interpreter) : undefined;
    if (cst.source !== null) {
      this.log.info(`quick fixes: libcst ${cst.version} (${cst.source === "bundled" ? `bundled, ${cst.path}` : `from the environment, ${cst.location}`})`);
    } else if (this.libcstNotice) {
      this.log.warn(this.libcstNotice);
      if (cst.bundledError) this.log.warn(`bundled libcst: ${cst.bundledError}`);
      if (cst.error) this.log.warn(`environment libcst: ${cst.error}`);
      this.showNotice(this.libcstNotice);
    }

    const launch = S.serverLaunch(s, interpreter, ctx, preflight.info);
    this.log.info(
      `server command: ${[launch.command, ...launch.args].join(" ")}` +
        (s.importStrategy === "useBundled" ? ` (PYTHONPATH=${launch.env.PYTHONPATH})` : ""),
    );
    const serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: { cwd: launch.cwd, env: launch.env },
    };
    this.serverOutput = [];
    const holder: { client?: LanguageClient } = {};
    const client = new LanguageClient(ID, NAME, serverOptions, this.clientOptions(s, trusted, holder));
    holder.client = client;
    // The server's own "fixes are unavailable" warning only repeats, less precisely, the notice above.
    client.onNotification(ShowMessageNotification.type, (m) => {
      if (this.libcstNotice && /fixes are unavailable/.test(m.message)) {
        this.log.warn(m.message);
        return;
      }
      if (m.type === MessageType.Error) void vscode.window.showErrorMessage(m.message);
      else if (m.type === MessageType.Warning) void vscode.window.showWarningMessage(m.message);
      else void vscode.window.showInformationMessage(m.message);
    });
    client.onDidChangeState((e) => {
      if (client !== this.client) return;
      if (e.newState === State.Running) this.state = "running";
      else if (e.newState === State.Starting) this.state = "starting";
      else if (this.state !== "error") this.state = "stopped";
      this.render();
    });
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      if (this.client === client) {
        this.client = undefined;
        await client.dispose().catch(() => undefined);
      }
      await new Promise((r) => setTimeout(r, 500)); // let the dead server's last stderr lines arrive
      return this.fail(`The gradguard server stopped while starting (${e instanceof Error ? e.message : e}).${this.lastOutput()}`);
    }
    this.state = "running";
    this.render();
  }

  private lastOutput(): string {
    const lines = this.serverOutput.filter((l) => l.trim() !== "");
    return lines.length ? ` Its last output: ${lines.slice(-2).join(" | ")}` : "";
  }

  /** The server's stderr into the output channel, at the level of its `gradguard-lsp LEVEL` log prefix. */
  private pipeStderr(input: NodeJS.ReadableStream, out: vscode.LogOutputChannel): void {
    let level: "error" | "warn" | "info" | "debug" = "error"; // unprefixed output before any log line: a crash
    readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on("line", (line) => {
      this.serverOutput.push(line);
      if (this.serverOutput.length > 50) this.serverOutput.shift();
      const m = /^gradguard-lsp (CRITICAL|ERROR|WARNING|INFO|DEBUG)\b/.exec(line);
      if (m) level = ({ CRITICAL: "error", ERROR: "error", WARNING: "warn", INFO: "info", DEBUG: "debug" } as const)[m[1] as "ERROR"];
      out[level](line);
    });
  }

  private clientOptions(
    s: S.ExtensionSettings,
    trusted: boolean,
    holder: { client?: LanguageClient },
  ): LanguageClientOptions {
    const current = () => holder.client !== undefined && holder.client === this.client;
    return {
      stdioOptions: {
        stdout: (input, out) => readline.createInterface({ input, terminal: false }).on("line", (l) => out.info(l)),
        stderr: (input, out) => this.pipeStderr(input, out),
      },
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
      ],
      outputChannel: this.log,
      traceOutputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: S.serverSettings(s, trusted),
      diagnosticCollectionName: ID,
      diagnosticCollectionProvider: this.diagnostics,
      // Pull model: on open, on save, and (run = onType) on every change.
      diagnosticPullOptions: { onChange: s.run === "onType", onSave: true },
      middleware: {
        // Push model (a server that publishes): with run = onSave, keep the last findings while the file is dirty.
        handleDiagnostics: (uri, diagnostics, next) => {
          if (this.settings.run === "onSave") {
            const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
            if (doc?.isDirty) return;
          }
          next(uri, diagnostics);
        },
        workspace: {
          // A server asking for the "gradguard" section gets the same object as didChangeConfiguration.
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) return result;
            const mapped = S.serverSettings(this.readSettings(), this.trusted);
            return result.map((value, i) => (params.items[i]?.section === ID ? mapped.gradguard : value));
          },
        },
      },
      errorHandler: {
        error: (_error, _message, count) => ({ action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown }),
        closed: () => {
          // stopped on purpose, or a client that already failed and was replaced: never restart it
          if (this.stopping || !current()) return { action: CloseAction.DoNotRestart, handled: true };
          if (this.crashes.crashed(Date.now())) {
            this.log.warn("the server exited; restarting it");
            return { action: CloseAction.Restart, handled: true };
          }
          void this.fail(
            "The gradguard server exited 4 times within 3 minutes and was not restarted again. " +
              `The gradguard output has its log; run "gradguard: Restart server" once the cause is fixed.${this.lastOutput()}`,
          );
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
      initializationFailedHandler: (error) => {
        this.log.error(`initialize failed: ${error instanceof Error ? error.message : error}`);
        return false;
      },
    };
  }

  private showNotice(message: string): void {
    if (this.noticesShown.has(message)) return;
    this.noticesShown.add(message);
    const actions = ["Show Log", "Open Settings"];
    if (this.trusted && pythonExtensionInstalled()) actions.push("Select Interpreter");
    void vscode.window.showWarningMessage(message, ...actions).then((choice) => {
      if (choice === "Show Log") this.log.show(true);
      else if (choice === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "gradguard.interpreter");
      else if (choice === "Select Interpreter") void vscode.commands.executeCommand("python.setInterpreter");
    });
  }

  private fail(message: string): void {
    this.state = "error";
    this.lastError = message;
    this.log.error(message);
    this.render();
    const actions = ["Show Log", "Open Settings"];
    if (this.trusted && pythonExtensionInstalled()) actions.push("Select Interpreter");
    void vscode.window.showErrorMessage(message, ...actions).then((choice) => {
      if (choice === "Show Log") this.log.show(true);
      else if (choice === "Open Settings") void vscode.commands.executeCommand("workbench.action.openSettings", "gradguard");
      else if (choice === "Select Interpreter") void vscode.commands.executeCommand("python.setInterpreter");
    });
  }

  private render(): void {
    const item = this.status;
    const restricted = !this.trusted;
    const tip = new vscode.MarkdownString(undefined, true);
    item.backgroundColor = undefined;
    switch (this.state) {
      case "starting":
        item.text = "$(loading~spin) gradguard";
        tip.appendMarkdown("gradguard: starting the language server");
        break;
      case "running": {
        item.text = restricted ? "$(shield) gradguard" : "$(check) gradguard";
        const i = this.server;
        tip.appendMarkdown(`**gradguard ${i?.gradguard ?? ""}** is running`);
        if (i) {
          tip.appendMarkdown(
            `\n\n${i.importStrategy === "useBundled" ? "bundled with the extension" : "from the environment"}, ` +
              `on Python ${i.version}: \`${i.executable}\``,
          );
          tip.appendMarkdown(
            i.libcst.source !== null
              ? `\n\nQuick fixes: on (libcst ${i.libcst.version}, ${i.libcst.source === "bundled" ? "bundled" : "from the environment"})`
              : "\n\nQuick fixes: **off**",
          );
          if (this.libcstNotice) tip.appendText(`\n\n${this.libcstNotice}`);
        }
        break;
      }
      case "error":
        item.text = "$(error) gradguard";
        item.backgroundColor = new vscode.ThemeColor("statusBarItem.errorBackground");
        tip.appendText(this.lastError ?? "the server failed");
        break;
      default:
        item.text = "$(circle-slash) gradguard";
        tip.appendMarkdown("gradguard: the language server is stopped");
    }
    if (restricted) {
      tip.appendMarkdown(
        "\n\n**Restricted mode** (untrusted workspace): static analysis only; the runtime probe is off and " +
          "workspace values of the interpreter, args and probe settings are ignored.",
      );
    }
    tip.appendMarkdown("\n\nClick to show the log.");
    item.tooltip = tip;
  }
}

/** bundled/libcst/TARGET.json, or undefined (the universal .vsix, or a broken file: logged). */
function readLibcstBundle(dir: string, log: vscode.LogOutputChannel): S.LibcstBundle | undefined {
  const file = path.join(dir, "TARGET.json");
  if (!fs.existsSync(file)) return undefined;
  try {
    const b = JSON.parse(fs.readFileSync(file, "utf8")) as S.LibcstBundle;
    return b && typeof b.target === "string" && Array.isArray(b.tags) ? b : undefined;
  } catch (e) {
    log.warn(`cannot read ${file}: ${e}`);
    return undefined;
  }
}

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<GradguardApi> {
  const log = vscode.window.createOutputChannel(NAME, { log: true });
  context.subscriptions.push(log);
  const ctl = new Controller(context, log);
  controller = ctl;

  context.subscriptions.push(
    vscode.commands.registerCommand("gradguard.restart", () => ctl.restart("restart command")),
    vscode.commands.registerCommand("gradguard.showLogs", () => log.show(true)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      const effect = S.changeEffect((key) => e.affectsConfiguration(key));
      if (effect === "restart") void ctl.restart("settings changed");
      else if (effect === "configuration") void ctl.sendConfiguration();
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void ctl.restart("workspace trusted")),
    { dispose: () => void ctl.stop() },
  );
  // The Python extension's interpreter is only used (and so only watched) in a trusted workspace.
  let watchingPython = false;
  const watchPython = () => {
    if (watchingPython || !vscode.workspace.isTrusted) return;
    watchingPython = true;
    // Without awaiting: activating the Python extension must not hold up ours.
    void onPythonInterpreterChanged(() => {
      if (vscode.workspace.isTrusted && ctl.readSettings().interpreter.length === 0) {
        void ctl.restart("Python interpreter changed");
      }
    }, log).then((d) => d && context.subscriptions.push(d));
  };
  context.subscriptions.push(vscode.workspace.onDidGrantWorkspaceTrust(watchPython));
  watchPython();
  void ctl.restart("activation");
  return {
    get state() {
      return ctl.state;
    },
    get server() {
      return ctl.server;
    },
    get lastError() {
      return ctl.lastError;
    },
    get notice() {
      return ctl.notice;
    },
    whenIdle: () => ctl.whenIdle(),
  };
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}
