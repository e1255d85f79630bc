// DER in and out through node-forge's ASN.1, as bytes Node's crypto takes.
import forge from "node-forge";

/** The DER encoding of one ASN.1 node. */
export function derBytes(node: forge.asn1.Asn1): Buffer {
  return Buffer.from(forge.asn1.toDer(node).getBytes(), "binary");
}

/**
 * Strict DER, every byte consumed, BIT STRINGs left as bytes: a signature or a public key is not
 * ASN.1 inside for every key type, and forge would otherwise try to parse it. (The options object
 * is in forge but not in its type definitions.)
 */
export function fromDerBytes(bytes: string | Buffer): forge.asn1.Asn1 {
  const binary = typeof bytes === "string" ? bytes : bytes.toString("binary");
  return (forge.asn1.fromDer as unknown as (bytes: string, options: object) => forge.asn1.Asn1)(binary, {
    strict: true,
    parseAllBytes: true,
    decodeBitStrings: false,
  });
}
