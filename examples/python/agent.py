#!/usr/bin/env python3
"""A minimal ModelForge node agent in Python, built on stubs generated from proto/ with grpcio.

It follows the call sequence in docs/clients.md:

1. GetServerInfo without trusting the server, then pin its CA: the SHA-256 of the CA's DER must
   equal the join command's --ca-fingerprint (as kubeadm does). Every later call verifies the
   server against that CA only.
2. Enroll: a fresh RSA key that never leaves this directory, a CSR for it, the one-time token.
3. Session: Hello first; Welcome answers with the configuration and the stream sequences the
   server has accepted, from which the inventory sequence continues (replays are refused).
4. Heartbeats at the interval Welcome set; one inventory report.
5. Leases pushed down the stream: progress carrying the lease's attempt, then completion.

It serves runtime.health.v1 only (answering "healthy" for the runtime it is asked about) and
exits after --jobs jobs, so a test can run it to the end. Dependencies are Debian's python3-grpcio,
python3-protobuf and python3-cryptography; the stubs come from grpc_tools.protoc (see README.md).

Usage:
  agent.py enroll --server https://HOST:PORT --token mfet_... --ca-fingerprint sha256:... --state DIR
  agent.py run --state DIR [--jobs N]
"""

import argparse
import hashlib
import http.client
import json
import os
import queue
import socket
import ssl
import sys
import threading
import urllib.parse

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.protobuf import timestamp_pb2

from modelforge.agent.v1 import agent_pb2, agent_pb2_grpc
from modelforge.jobs.v1 import jobs_pb2

AGENT_VERSION = "0.1.0"  # a semantic version: the server refuses one below its min_agent_version
PROTOCOL_VERSION = 1
CAPABILITIES = ["runtime.health.v1"]


def log(event, **fields):
    """One JSON line per event on stdout; never a key, certificate or token."""
    print(json.dumps({"event": event, **fields}), flush=True)


def target_of(server_url):
    u = urllib.parse.urlparse(server_url)
    if u.scheme != "https" or u.hostname is None:
        raise SystemExit(f"--server must be an https:// URL, got {server_url!r}")
    return u.hostname, u.port or 443


def server_info_unverified(server_url):
    """GetServerInfo over the Connect protocol (JSON over HTTPS), trusting nothing yet.

    grpcio cannot turn off certificate verification, and this first call is exactly the one that
    must not depend on it: its answer is trusted only once its CA matches the pinned fingerprint.
    """
    host, port = target_of(server_url)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
    try:
        conn.request(
            "POST",
            "/modelforge.agent.v1.AgentService/GetServerInfo",
            body=b"{}",
            headers={"Content-Type": "application/json"},
        )
        res = conn.getresponse()
        body = res.read()
        if res.status != 200:
            raise SystemExit(f"GetServerInfo failed: HTTP {res.status}")
        return json.loads(body)
    finally:
        conn.close()


def fingerprint_of(pem):
    der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def channel(state_dir, host, port, with_identity):
    ca = read(state_dir, "ca.crt")
    if with_identity:
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=read(state_dir, "node.key"), certificate_chain=read(state_dir, "node.crt")
        )
    else:
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.secure_channel(f"{host}:{port}", creds)


def read(state_dir, name):
    with open(os.path.join(state_dir, name), "rb") as f:
        return f.read()


def write(state_dir, name, data, mode=0o600):
    """Atomically, created with `mode` from the start (keys are never world-readable)."""
    path = os.path.join(state_dir, name)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_state(state_dir):
    return json.loads(read(state_dir, "state.json"))


def save_state(state_dir, state):
    write(state_dir, "state.json", json.dumps(state).encode())


def enroll(args):
    info = server_info_unverified(args.server)
    got = fingerprint_of(info["caCertificatePem"])
    if got != args.ca_fingerprint:
        raise SystemExit(f"refusing the server: its CA is {got}, the join command pinned {args.ca_fingerprint}")
    os.makedirs(args.state, mode=0o700, exist_ok=True)
    write(args.state, "ca.crt", info["caCertificatePem"].encode(), 0o644)

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, socket.gethostname()[:64] or "node")]))
        .sign(key, hashes.SHA256())
    )
    host, port = target_of(args.server)
    with channel(args.state, host, port, with_identity=False) as ch:
        res = agent_pb2_grpc.AgentServiceStub(ch).Enroll(
            agent_pb2.EnrollRequest(
                token=args.token,
                csr_pem=csr.public_bytes(serialization.Encoding.PEM).decode(),
                node_name=args.name or "",
                agent_version=AGENT_VERSION,
            ),
            timeout=30,
        )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write(args.state, "node.key", key_pem)
    write(args.state, "node.crt", res.certificate_pem.encode(), 0o644)
    save_state(args.state, {"server": args.server, "node_id": res.node_id, "sequences": {"inventory": 0}})
    log("enrolled", node_id=res.node_id)


class Session:
    """One open Session: an outbound queue the stream reads from, and replies matched by message_id."""

    def __init__(self, stub):
        self.outbound = queue.Queue()
        self.next_id = 1  # 1 is the Hello's
        self.lock = threading.Lock()
        self.waiting = {}
        self.responses = stub.Session(iter(self.outbound.get, None))

    def send(self, **message):
        """Sends one message; returns an Event and a slot that holds the Reply once it arrives."""
        with self.lock:
            self.next_id += 1
            message_id = self.next_id
            done = threading.Event()
            slot = {}
            self.waiting[message_id] = (done, slot)
        self.outbound.put(agent_pb2.SessionRequest(message_id=message_id, **message))
        return done, slot

    def request(self, timeout=30, **message):
        done, slot = self.send(**message)
        if not done.wait(timeout):
            raise TimeoutError(f"no reply to {list(message)} within {timeout} s")
        reply = slot["reply"]
        if reply.WhichOneof("result") == "error":
            raise RuntimeError(f"{list(message)[0]} refused: {reply.error.code}: {reply.error.message}")
        return reply

    def answered(self, reply):
        with self.lock:
            done, slot = self.waiting.pop(reply.message_id, (None, None))
        if done is not None:
            slot["reply"] = reply
            done.set()

    def close(self):
        self.outbound.put(None)


def now_ts():
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def run(args):
    state = load_state(args.state)
    host, port = target_of(state["server"])
    ch = channel(args.state, host, port, with_identity=True)
    session = Session(agent_pb2_grpc.AgentServiceStub(ch))
    leases = queue.Queue()
    stop = threading.Event()

    # Hello must come first, and only once; its reply is Welcome (not a Reply).
    session.outbound.put(
        agent_pb2.SessionRequest(
            message_id=1,
            hello=agent_pb2.Hello(protocol_version=PROTOCOL_VERSION, agent_version=AGENT_VERSION, capabilities=CAPABILITIES),
        )
    )
    welcomed = threading.Event()
    welcome = {}

    def read_stream():
        try:
            for res in session.responses:
                kind = res.WhichOneof("message")
                if kind == "welcome":
                    welcome["value"] = res.welcome
                    welcomed.set()
                elif kind == "reply":
                    session.answered(res.reply)
                elif kind == "lease":
                    leases.put(res.lease)
                elif kind == "cancel":
                    log("cancel", job_id=res.cancel.job_id, reason=res.cancel.reason)
        except grpc.RpcError as e:
            # The stream ends with a status: unauthenticated (credential revoked), permission_denied
            # (node disabled), failed_precondition (agent version too old), unavailable (retry).
            if not stop.is_set():
                log("session ended", code=e.code().name, reason=e.details())
        finally:
            welcomed.set()
            leases.put(None)

    threading.Thread(target=read_stream, daemon=True).start()
    if not welcomed.wait(30) or "value" not in welcome:
        raise SystemExit("no Welcome from the server")
    w = welcome["value"]
    log("session open", node_id=w.node_id, server_version=w.server_version)

    # Sequences are strictly increasing per stream and persisted; continue after the server's.
    seq = max(state["sequences"]["inventory"], w.stream_sequences.get("inventory", 0)) + 1
    state["sequences"]["inventory"] = seq
    save_state(args.state, state)
    session.request(
        inventory=agent_pb2.PutInventoryRequest(
            report=agent_pb2.InventoryReport(sequence=seq, observed_at=now_ts(), gpu_collection_complete=True)
        )
    )
    log("inventory sent", sequence=seq)

    interval = w.config.heartbeat_interval.ToTimedelta().total_seconds() or 10

    def heartbeat():
        while not stop.wait(interval):
            try:
                session.request(heartbeat=agent_pb2.HeartbeatRequest(agent_version=AGENT_VERSION, sent_at=now_ts()))
            except Exception as e:  # the stream is gone; the main loop notices
                log("heartbeat failed", reason=str(e))
                return

    session.request(heartbeat=agent_pb2.HeartbeatRequest(agent_version=AGENT_VERSION, sent_at=now_ts()))
    log("heartbeat answered")
    threading.Thread(target=heartbeat, daemon=True).start()
    log("ready")

    done = 0
    while done < args.jobs:
        lease = leases.get()
        if lease is None:
            raise SystemExit("the session ended")
        kind = lease.spec.WhichOneof("kind")
        log("lease", job_id=lease.job_id, attempt=lease.attempt, kind=kind)
        if kind != "runtime_health":
            session.request(
                job_fail=agent_pb2.FailJobRequest(
                    job_id=lease.job_id,
                    attempt=lease.attempt,
                    failure=jobs_pb2.JobFailure(
                        code=jobs_pb2.JOB_FAILURE_CODE_UNSUPPORTED_CAPABILITY, message=f"{kind} is not supported", retryable=False
                    ),
                )
            )
            continue
        # Every report carries the lease's attempt; an aborted reply means "lease lost: stop work".
        session.request(
            job_progress=agent_pb2.ReportJobProgressRequest(
                job_id=lease.job_id, attempt=lease.attempt, progress=jobs_pb2.JobProgress(percent=50, message="checking")
            )
        )
        runtime_id = lease.spec.runtime_health.runtime_id
        session.request(
            job_complete=agent_pb2.CompleteJobRequest(
                job_id=lease.job_id,
                attempt=lease.attempt,
                result=jobs_pb2.JobResult(
                    runtime_health=jobs_pb2.HealthResult(healthy=True, detail=f"python example checked {runtime_id}")
                ),
            )
        )
        log("completed", job_id=lease.job_id)
        done += 1

    stop.set()
    session.close()
    ch.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("enroll", help="pin the CA, enroll with a one-time token")
    e.add_argument("--server", required=True)
    e.add_argument("--token", required=True)
    e.add_argument("--ca-fingerprint", required=True)
    e.add_argument("--name")
    e.add_argument("--state", required=True, help="directory for the key, certificates and sequences (0700)")
    r = sub.add_parser("run", help="open a Session, heartbeat, serve runtime.health.v1 jobs")
    r.add_argument("--state", required=True)
    r.add_argument("--jobs", type=int, default=1, help="exit after this many jobs")
    args = p.parse_args()
    try:
        enroll(args) if args.command == "enroll" else run(args)
    except grpc.RpcError as err:
        log("rpc failed", code=err.code().name, reason=err.details())
        sys.exit(1)


if __name__ == "__main__":
    main()
