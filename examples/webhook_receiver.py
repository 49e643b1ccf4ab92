"""A vidforge webhook receiver, standard library only: verifies each delivery's signature, rejects a timestamp older
than five minutes, acknowledges every event once (deduplicating by its id) and prints it.

    WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py --port 8443 --cert cert.pem --key key.pem

vidforge delivers to https:// URLs only: serve it behind your TLS terminator, or give it a certificate as above.
During a key rotation set WEBHOOK_SECRET to both secrets, comma-separated: a delivery signed with either verifies.
Answer 2xx quickly and do the work afterwards: a slow or failed answer is retried (docs/webhooks.md).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_S = 300  # reject deliveries signed more than five minutes ago (or ahead): a captured one cannot be replayed


def verify(secrets: list[str], header: str, body: bytes, now: float | None = None) -> bool:
    """True when `header` (Vidforge-Signature: t=...,v1=...[,v1=...]) signs `body` with one of `secrets`, recently."""
    parts = [item.split("=", 1) for item in header.split(",") if "=" in item]
    timestamps = [value for key, value in parts if key.strip() == "t"]
    if len(timestamps) != 1 or not timestamps[0].isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamps[0])) > TOLERANCE_S:
        return False
    signed = timestamps[0].encode() + b"." + body
    expected = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets]
    return any(hmac.compare_digest(e, value) for key, value in parts if key.strip() == "v1" for e in expected)


class Receiver(BaseHTTPRequestHandler):
    secrets: list[str] = []
    seen: set[str] = set()  # event ids already handled (keep these in your database)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not verify(self.secrets, self.headers.get("Vidforge-Signature", ""), body):
            self.send_response(400)  # not from vidforge, or too old: not retried
            self.end_headers()
            return
        event = json.loads(body)
        if event["id"] not in self.seen:  # at least once: a repeat of an event already handled is acknowledged
            self.seen.add(event["id"])
            print(event["type"], event["task_id"], event["state"], json.dumps(event["metadata"]), flush=True)
        self.send_response(204)
        self.end_headers()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--cert", help="PEM certificate chain (omit behind a TLS terminator)")
    parser.add_argument("--key", help="PEM private key")
    args = parser.parse_args()
    Receiver.secrets = [s for s in os.environ["WEBHOOK_SECRET"].split(",") if s]
    server = ThreadingHTTPServer(("", args.port), Receiver)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
