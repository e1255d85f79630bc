// Credential renewal during a session: when the server says so, or when little enough of the
// certificate's lifetime remains, the agent makes a new key and CSR, has them signed, saves the new
// identity and reconnects with it. One renewal at a time; a failed one is tried again at the next
// check.
import { ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { AgentConfig, Instruction } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import type { Clock } from "../../common/clock.js";
import { codeName } from "../../common/codes.js";
import { checkIssued } from "../enroll.js";
import { generateNodeKeyAndCsr } from "../pki/keys.js";
import type { Validity } from "../pki/validity.js";
import { renewalDue } from "./timing.js";
import type { AgentState, StateStore } from "../state.js";
import type { NodeConnection } from "./transport.js";

/** Renew once no more than this fraction of the lifetime remains, unless the server sets another. */
const defaultRenewFraction = 1 / 3;

export interface RenewalDeps {
  store: StateStore;
  log: Logger;
  clock: Clock;
  connect(state: AgentState): NodeConnection;
  /** The agent's stop: a renewal outlives its session, not the agent. */
  signal: AbortSignal;
  timeoutMs: number;
  validity(certPem: string): Validity;
  /** The new identity is saved: the session should end and reconnect with it. */
  renewed(): void;
}

export class CredentialRenewal {
  private renewing: Promise<void> | undefined;

  constructor(private readonly deps: RenewalDeps) {}

  /** Starts a renewal unless one is under way. */
  renew(reason: string): void {
    this.renewing ??= this.run(reason).catch((err: unknown) => {
      this.renewing = undefined;
      this.deps.log.warn({ code: codeName(ConnectError.from(err).code), method: "RenewCredential" }, "renewal failed");
    });
  }

  /** Renews if the certificate is near enough its end by the server's fraction. */
  checkDue(config: AgentConfig | undefined): void {
    const { from, to } = this.deps.validity(this.deps.store.current.certPem);
    const fraction = config?.renewRemainingFraction || defaultRenewFraction;
    if (renewalDue(from, to, this.deps.clock.now(), fraction)) this.renew("certificate nearing expiry");
  }

  /** Follows the server's instructions (renewal is the only kind). */
  follow(instructions: Instruction[]): void {
    for (const i of instructions) if (i.kind.case === "renewCredential") this.renew(i.kind.value.reason);
  }

  /** Resolves when no renewal is under way: it decides which certificate the next session presents. */
  async settled(): Promise<void> {
    await this.renewing;
  }

  private async run(reason: string): Promise<void> {
    const { store, log } = this.deps;
    log.info({ reason }, "renewing credential");
    const { keyPem, csrPem } = await generateNodeKeyAndCsr();
    // On a connection of its own, outliving the session: the server revokes the old credential as
    // it issues the new one, which ends this session, and the answer must still arrive.
    const own = this.deps.connect(store.current);
    const res = await own
      .renewCredential({ csrPem }, { signal: this.deps.signal, timeoutMs: this.deps.timeoutMs })
      .finally(() => own.close());
    checkIssued(res.certificatePem, keyPem, store.current.caPem, store.current.nodeId);
    await store.update({ keyPem, certPem: res.certificatePem });
    log.info("credential renewed; reconnecting with the new certificate");
    this.deps.renewed();
  }
}
