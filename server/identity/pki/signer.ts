import type { KeyObject, X509Certificate } from "node:crypto";
import type forge from "node-forge";

/** What issuing needs from the CA, prepared once at load time. */
export interface CaSigner {
  readonly x509: X509Certificate;
  readonly key: KeyObject;
  /** CA subject as forge attributes, used verbatim as the issuer of every certificate. */
  readonly subject: forge.pki.CertificateField[];
  /** CA subject key identifier (binary string) for the authorityKeyIdentifier extension. */
  readonly keyIdentifier: string;
  readonly notAfter: Date;
}

/** A certificate must not outlive its issuer: clients would reject it after that anyway. */
export function clampToCa(signer: CaSigner, notAfter: Date): Date {
  return notAfter.getTime() > signer.notAfter.getTime() ? signer.notAfter : notAfter;
}
