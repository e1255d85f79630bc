// The agent's side of a self-update: an agent.update instruction is downloaded, verified (digest,
// then the signature where a release key is configured), asked for its version by running it with
// --version (only once verified), swapped in beside the previous agent, and the agent exits for its
// service manager to start the new one. A refusal swaps nothing and is reported at the next Hello.
// The new agent confirms the update at its first Welcome; one that cannot is rolled back by
// ./prepare.ts at its next start (this watches the deadline, for an agent that hangs instead).
import { execFile } from "node:child_process";
import type { KeyObject } from "node:crypto";
import { existsSync, realpathSync } from "node:fs";
import { mkdir, readFile, readlink, rename, rm, symlink } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { create } from "@bufbuild/protobuf";
import {
  AgentUpdateReportSchema,
  type AgentUpdateInstruction,
  type AgentUpdateReport,
} from "../../gen/proto/modelforge/agent/v1/agent_update_pb.js";
import { signatureValid } from "../../common/release-key.js";
import type { AgentClient } from "../session/transport.js";
import { agentVersion } from "../version.js";
import { downloadRelease } from "./download.js";
import { pointCurrent, readJson, writeJson, type PendingUpdate, type UpdateLayout, type UpdateReport } from "./layout.js";
import { contentRefusal, versionRefusal } from "./rules.js";

/** The exit status that asks the service manager for a restart into the new agent (EX_TEMPFAIL). */
export const UPDATE_EXIT_CODE = 75;
/**
 * The files beside the bundle that a release shares with the agent that installed it: llama-server/
 * is the llama.cpp engine, and node_modules holds the GPU agent's CUDA builds (which the agent
 * looks for from its own directory to advertise llama.cpp+cuda).
 */
const SIBLINGS = ["llama-server", "node_modules"];

export interface UpdaterDeps {
  layout: UpdateLayout;
  client(): Promise<AgentClient>;
  /** The release signing key; undefined: releases are taken on their digest alone. */
  key: KeyObject | undefined;
  log: Logger;
  now(): number;
  /** The directory of the running bundle. */
  selfDir: string;
  /** How long the new agent has to reach a healthy session. */
  deadlineMs: number;
  /** Stops the agent with this exit status. */
  exit(code: number): void;
  signal: AbortSignal;
}

export class Updater {
  private running: Promise<void> | undefined;
  private deadline: NodeJS.Timeout | undefined;

  constructor(private readonly deps: UpdaterDeps) {}

  /** What the next Hello reports, if anything. */
  async lastUpdate(): Promise<AgentUpdateReport | undefined> {
    const report = await readJson<UpdateReport>(this.deps.layout.report);
    return report === undefined ? undefined : create(AgentUpdateReportSchema, report);
  }

  /** Arms the deadline of an update this agent is the new side of. */
  async started(): Promise<void> {
    const pending = await readJson<PendingUpdate>(this.deps.layout.pending);
    if (pending === undefined || pending.version !== agentVersion) return;
    this.deadline = setTimeout(
      () => {
        this.deps.log.error({ version: pending.version }, "no healthy session by the update's deadline: exiting for the rollback");
        this.deps.exit(1);
      },
      Math.max(0, pending.deadlineAt - this.deps.now()),
    );
  }

  /** A Welcome: the report was heard, and an update to this version is proven. */
  async welcomed(): Promise<void> {
    clearTimeout(this.deadline);
    await rm(this.deps.layout.report, { force: true });
    const pending = await readJson<PendingUpdate>(this.deps.layout.pending);
    if (pending?.version === agentVersion) {
      await rm(this.deps.layout.pending, { force: true });
      this.deps.log.info({ version: agentVersion, rolloutId: pending.rolloutId }, "update confirmed by a healthy session");
    }
  }

  /** Follows an instruction; one at a time, and none to the version already running. `refused` hears a refusal. */
  follow(instruction: AgentUpdateInstruction, refused: () => void): void {
    if (instruction.version === agentVersion || this.running !== undefined) return;
    this.running = this.update(instruction)
      .catch(async (err: unknown) => {
        const reason = (err as Error).message.startsWith("refused:") ? (err as Error).message : `refused: ${(err as Error).message}`;
        this.deps.log.error({ version: instruction.version, reason }, "agent update refused");
        await writeJson(this.deps.layout.report, {
          rolloutId: instruction.rolloutId,
          version: instruction.version,
          succeeded: false,
          reason,
        });
        refused();
      })
      .finally(() => {
        this.running = undefined;
      });
  }

  private async update(want: AgentUpdateInstruction): Promise<void> {
    const { layout, log } = this.deps;
    log.info({ version: want.version, sha256: want.sha256, sizeBytes: String(want.sizeBytes) }, "agent update: downloading");
    const got = await downloadRelease(await this.deps.client(), want, layout.downloads, this.deps.signal);
    const valid = this.deps.key === undefined ? undefined : await this.verify(got.path, want.signature, this.deps.key);
    const bad = contentRefusal({ sha256: want.sha256, sizeBytes: Number(want.sizeBytes) }, { ...got, signatureValid: valid });
    if (bad !== undefined) {
      await rm(got.path, { force: true });
      throw new Error(bad);
    }
    const dir = join(layout.releases, `${want.version}-${want.sha256.slice(0, 12)}`);
    await this.stage(got.path, dir);
    const wrong = versionRefusal(want.version, await reportedVersion(join(dir, "modelforge-agent.mjs")));
    if (wrong !== undefined) throw new Error(wrong);
    const previous = await readlink(layout.current);
    const pending: PendingUpdate = {
      rolloutId: want.rolloutId,
      version: want.version,
      previous,
      attempts: 0,
      deadlineAt: this.deps.now() + this.deps.deadlineMs,
    };
    await writeJson(layout.pending, pending);
    await pointCurrent(layout, dir);
    log.info({ version: want.version, previous }, "agent update: swapped in; exiting for the service manager to start it");
    this.deps.exit(UPDATE_EXIT_CODE);
  }

  private async verify(path: string, signature: Uint8Array, key: KeyObject): Promise<boolean> {
    return signature.byteLength === 64 && signatureValid(key, await readFile(path), signature);
  }

  /** The release's directory: the verified file, and links to what it shares with this agent. */
  private async stage(file: string, dir: string): Promise<void> {
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await rename(file, join(dir, "modelforge-agent.mjs"));
    for (const name of SIBLINGS) {
      const beside = join(this.deps.selfDir, name);
      if (existsSync(beside)) await symlink(realpathSync(beside), join(dir, name));
    }
  }
}

/** What the file says its version is; undefined when it would not say within the time. */
function reportedVersion(file: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [file, "--version"],
      { timeout: 30_000, maxBuffer: 4096, env: { PATH: process.env.PATH ?? "" } },
      (err, stdout) => resolve(err === null ? stdout.trim() : undefined),
    );
  });
}
