// The InvokeStart the control plane pushes for each relayed request, read off the wire by hand: it
// is the one server message per request, and protobuf-es's reflective decode of it (a zero message
// per nested message, a field lookup per field) showed in the agent's profile per request
// (bench/openai.ts, BENCH_CPU_PROF). Like the server's readers (server/sessions/invoke-wire.ts),
// it reads only the shape the server writes, as protobuf-es would read it: fields in number order,
// each at most once, names of short printable ASCII, integers below 2^49. Any other message, or
// any other shape of this one, is left to protobuf-es. test/unit/agent-invoke-start.test.ts holds
// it to fromBinary.
//
//   SessionResponse  { invoke = 7 (InvokeStart) }
//   InvokeStart      { invoke_id = 1; invoke = 2 (DeploymentInvoke); api = 3; stream = 4 }
//   DeploymentInvoke { deployment_id = 1; request_id = 2; content_type = 3; payload = 4;
//                      timeout = 5 (Duration); revision = 6; replica = 7 (UInt32Value) }
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { DeploymentInvoke } from "../../gen/proto/modelforge/jobs/v1/jobs_pb.js";
import type { InvokeStart, SessionResponse } from "../../gen/proto/modelforge/agent/v1/agent_pb.js";
import { printableAscii, readVarint, type Cursor } from "../../common/protobuf-wire.js";

/** Longest name read here (the proto bounds them at 64 and 128 bytes); a longer one goes to protobuf-es. */
const maxNameBytes = 128;

const empty = new Uint8Array(0);

/** An encoded SessionResponse that is an InvokeStart, as fromBinary reads it; undefined for anything else. */
export function plainInvokeStart(bytes: Uint8Array): SessionResponse | undefined {
  const end = bytes.length;
  if (end < 2 || bytes[0] !== 0x3a) return undefined;
  const cursor = { at: 1 };
  const n = readVarint(bytes, cursor, end);
  if (n < 0 || cursor.at + n !== end) return undefined;
  const value = invokeStart(bytes, cursor, end);
  if (value === undefined) return undefined;
  return { $typeName: "modelforge.agent.v1.SessionResponse", message: { case: "invoke", value } };
}

function invokeStart(bytes: Uint8Array, cursor: Cursor, end: number): InvokeStart | undefined {
  let invokeId = 0n;
  let invoke: DeploymentInvoke | undefined;
  let api = 0;
  let stream = false;
  let last = 0;
  while (cursor.at < end) {
    const tag = bytes[cursor.at++]!;
    const field = tag >> 3;
    if (field <= last) return undefined;
    last = field;
    if (tag === 0x08) {
      const v = readVarint(bytes, cursor, end);
      if (v < 0) return undefined;
      invokeId = BigInt(v);
    } else if (tag === 0x12) {
      const n = readVarint(bytes, cursor, end);
      if (n < 0 || cursor.at + n > end) return undefined;
      invoke = deploymentInvoke(bytes, cursor, cursor.at + n);
      if (invoke === undefined) return undefined;
    } else if (tag === 0x18) {
      // An enum is an int32: a negative one takes ten bytes, past what readVarint reads.
      api = readVarint(bytes, cursor, end);
      if (api < 0 || api > 0x7fffffff) return undefined;
    } else if (tag === 0x20) {
      const v = readVarint(bytes, cursor, end);
      if (v !== 0 && v !== 1) return undefined;
      stream = v === 1;
    } else return undefined;
  }
  return { $typeName: "modelforge.agent.v1.InvokeStart", invokeId, invoke, api, stream };
}

function deploymentInvoke(bytes: Uint8Array, cursor: Cursor, end: number): DeploymentInvoke | undefined {
  const out: DeploymentInvoke = {
    $typeName: "modelforge.jobs.v1.DeploymentInvoke",
    deploymentId: "",
    requestId: "",
    contentType: "",
    payload: empty,
    timeout: undefined,
    revision: 0n,
    replica: undefined,
  };
  let last = 0;
  while (cursor.at < end) {
    const tag = bytes[cursor.at++]!;
    const field = tag >> 3;
    if (field <= last || (tag & 7) !== (field === 6 ? 0 : 2)) return undefined;
    last = field;
    if (field === 6) {
      const v = readVarint(bytes, cursor, end);
      if (v < 0) return undefined;
      out.revision = BigInt(v);
      continue;
    }
    const n = readVarint(bytes, cursor, end);
    if (n < 0 || cursor.at + n > end) return undefined;
    const from = cursor.at;
    cursor.at += n;
    switch (field) {
      case 1:
      case 2:
      case 3: {
        const name = asciiOf(bytes, from, cursor.at);
        if (name === undefined) return undefined;
        if (field === 1) out.deploymentId = name;
        else if (field === 2) out.requestId = name;
        else out.contentType = name;
        break;
      }
      case 4:
        out.payload = bytes.subarray(from, cursor.at);
        break;
      case 5: {
        const timeout = duration(bytes, from, cursor.at);
        if (timeout === undefined) return undefined;
        out.timeout = timeout;
        break;
      }
      case 7: {
        const replica = uint32Value(bytes, from, cursor.at);
        if (replica === undefined) return undefined;
        out.replica = replica;
        break;
      }
      default:
        return undefined;
    }
  }
  return out;
}

/** A Duration of non-negative seconds below 2^49 and nanos below a second. */
function duration(bytes: Uint8Array, from: number, end: number): Duration | undefined {
  const cursor = { at: from };
  let seconds = 0;
  let nanos = 0;
  let last = 0;
  while (cursor.at < end) {
    const tag = bytes[cursor.at++]!;
    if (tag !== 0x08 && tag !== 0x10) return undefined;
    if (tag >> 3 <= last) return undefined;
    last = tag >> 3;
    const v = readVarint(bytes, cursor, end);
    if (v < 0) return undefined;
    if (tag === 0x08) seconds = v;
    else if (v > 999_999_999) return undefined;
    else nanos = v;
  }
  return { $typeName: "google.protobuf.Duration", seconds: BigInt(seconds), nanos };
}

/** A UInt32Value's value (0 when the wrapper is present but empty). */
function uint32Value(bytes: Uint8Array, from: number, end: number): number | undefined {
  if (from === end) return 0;
  if (bytes[from] !== 0x08) return undefined;
  const cursor = { at: from + 1 };
  const v = readVarint(bytes, cursor, end);
  return v < 0 || v > 0xffffffff || cursor.at !== end ? undefined : v;
}

function asciiOf(bytes: Uint8Array, from: number, to: number): string | undefined {
  return to - from > maxNameBytes ? undefined : printableAscii(bytes, from, to);
}
