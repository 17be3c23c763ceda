// The interpreter selected in the Python extension (ms-python.python), through its public
// `environments` API.  The extension is optional: without it, gradguard.interpreter or python3.
import * as vscode from "vscode";

const PYTHON_EXTENSION = "ms-python.python";

/** The part of the Python extension's public API that is used (see @vscode/python-extension). */
interface EnvironmentPath {
  readonly id: string;
  readonly path: string;
}
interface PythonExtensionApi {
  readonly ready?: Promise<void>;
  readonly environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri | vscode.WorkspaceFolder): EnvironmentPath;
    resolveEnvironment(
      environment: EnvironmentPath | string,
    ): Promise<{ readonly executable: { readonly uri: vscode.Uri | undefined } } | undefined>;
    readonly onDidChangeActiveEnvironmentPath: vscode.Event<EnvironmentPath>;
  };
}

export function pythonExtensionInstalled(): boolean {
  return vscode.extensions.getExtension(PYTHON_EXTENSION) !== undefined;
}

async function api(log: vscode.LogOutputChannel): Promise<PythonExtensionApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION);
  if (!ext) return undefined;
  try {
    const exports = ext.isActive ? ext.exports : await ext.activate();
    return exports?.environments ? exports : undefined;
  } catch (e) {
    log.warn(`the Python extension did not activate: ${e}`);
    return undefined;
  }
}

/** The executable of the active environment for `resource`, or undefined when there is none. */
export async function interpreterFromPythonExtension(
  resource: vscode.Uri | undefined,
  log: vscode.LogOutputChannel,
): Promise<string[] | undefined> {
  const python = await api(log);
  if (!python?.environments) return undefined;
  try {
    const active = python.environments.getActiveEnvironmentPath(resource);
    const env = await python.environments.resolveEnvironment(active);
    const exe = env?.executable.uri?.fsPath;
    if (!exe) {
      log.warn(`the Python extension's environment ${active.path} has no Python executable`);
      return undefined;
    }
    return [exe];
  } catch (e) {
    log.warn(`could not ask the Python extension for its interpreter: ${e}`);
    return undefined;
  }
}

/** Fires when the interpreter selected in the Python extension changes. */
export async function onPythonInterpreterChanged(
  listener: () => void,
  log: vscode.LogOutputChannel,
): Promise<vscode.Disposable | undefined> {
  const python = await api(log);
  return python?.environments?.onDidChangeActiveEnvironmentPath(() => listener());
}
