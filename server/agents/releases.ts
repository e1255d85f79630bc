// Agent releases: a row per (version, platform) naming bytes already in the artifact store. The
// bytes are checked against the digest the store verified, and against the release signing key
// when one is configured; they are never executed here.
import { readFile } from "node:fs/promises";
import type { KeyObject } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { AgentRelease, PrismaClient } from "../../gen/prisma/client.js";
import type { Clock } from "../../common/clock.js";
import { signatureValid } from "../../common/release-key.js";
import { recordAudit, type AuditActor } from "../audit/audit.js";
import { checkSha256, JobSpecError } from "../jobs/spec.js";
import type { ArtifactStore } from "../artifacts/store.js";
import { compareVersions, parseVersion } from "../agent-version.js";
import { releaseArtifact } from "../../common/agent-releases.js";
import { checkReleaseName, checkSignaturePresence, MAX_RELEASE_BYTES, type ReleaseName } from "./release-rules.js";

export interface ReleaseInput extends ReleaseName {
  sha256: string;
  sizeBytes: bigint;
  signature: Uint8Array;
}

export interface ReleasesDeps {
  prisma: PrismaClient;
  clock: Clock;
  store: Pick<ArtifactStore, "find" | "blobs">;
  /** The release signing key; undefined: releases are recorded unsigned. */
  key: KeyObject | undefined;
}

export class AgentReleases {
  constructor(private readonly deps: ReleasesDeps) {}

  /** Records a pushed release; `created` is false when the same one was recorded already. */
  async create(input: ReleaseInput, correlationId: string, by: AuditActor): Promise<{ release: AgentRelease; created: boolean }> {
    this.checkInput(input);
    const stored = await this.deps.store.find(releaseArtifact(input.sha256, input));
    if (stored === null || stored.sha256 !== input.sha256 || stored.sizeBytes !== input.sizeBytes) {
      throw new ConnectError(
        `release ${input.version} (${input.platform}) is not in the artifact store with this sha256 and size: push the file first (forge agents releases push)`,
        Code.FailedPrecondition,
      );
    }
    if (this.deps.key !== undefined) await this.verifySignature(input, this.deps.key);
    const name = { version: input.version, platform: input.platform };
    const now = new Date(this.deps.clock.now());
    return this.deps.prisma.$transaction(async (tx) => {
      const found = await tx.agentRelease.findUnique({ where: { version_platform: name } });
      if (found !== null) {
        if (found.sha256 !== input.sha256) {
          throw new ConnectError(`release ${input.version} (${input.platform}) is recorded with other content`, Code.AlreadyExists);
        }
        return { release: found, created: false };
      }
      const release = await tx.agentRelease.create({
        data: {
          ...name,
          sha256: input.sha256,
          sizeBytes: input.sizeBytes,
          signature: input.signature.byteLength > 0 ? Buffer.from(input.signature) : null,
          createdAt: now,
        },
      });
      await recordAudit(
        tx,
        {
          ...by,
          action: "agent.release.recorded",
          targetType: "agent_release",
          targetId: `${input.version}/${input.platform}`,
          correlationId,
          details: { sha256: input.sha256, sizeBytes: String(input.sizeBytes), signed: String(input.signature.byteLength > 0) },
        },
        now,
      );
      return { release, created: true };
    });
  }

  /** Every release, newest version first. */
  async list(): Promise<AgentRelease[]> {
    const rows = await this.deps.prisma.agentRelease.findMany({ take: 1000 });
    return rows.sort((a, b) => versionOrder(b.version, a.version) || a.platform.localeCompare(b.platform));
  }

  find(name: ReleaseName): Promise<AgentRelease | null> {
    const { version, platform } = name;
    return this.deps.prisma.agentRelease.findUnique({ where: { version_platform: { version, platform } } });
  }

  private checkInput(input: ReleaseInput): void {
    checkReleaseName(input);
    try {
      checkSha256(input.sha256, "sha256");
    } catch (err) {
      if (err instanceof JobSpecError) throw new ConnectError(err.message, Code.InvalidArgument);
      throw err;
    }
    if (input.sizeBytes <= 0n || input.sizeBytes > BigInt(MAX_RELEASE_BYTES)) {
      throw new ConnectError(`size_bytes: must be from 1 to ${MAX_RELEASE_BYTES}`, Code.InvalidArgument);
    }
    checkSignaturePresence(input.signature, this.deps.key !== undefined);
  }

  private async verifySignature(input: ReleaseInput, key: KeyObject): Promise<void> {
    const content = await readFile(this.deps.store.blobs.blobPath(input.sha256)).catch(() => {
      throw new ConnectError("the release's stored content is missing on this replica", Code.Unavailable);
    });
    if (!signatureValid(key, content, input.signature)) {
      throw new ConnectError(`signature: does not verify against the release signing key for ${input.version}`, Code.PermissionDenied);
    }
  }
}

function versionOrder(a: string, b: string): number {
  const x = parseVersion(a);
  const y = parseVersion(b);
  return x !== undefined && y !== undefined ? compareVersions(x, y) : a.localeCompare(b);
}
