#!/usr/bin/python3
"""NATS NKeys and JWTs for the authentication tests, offline, into DIR.

What nats-server and nats.c read, made with python3-cryptography (ed25519)
instead of compiling Go's jwt/nkeys packages at test time (seconds per run
saved). Formats as nats-io/nkeys and nats-io/jwt v2 define them:
  seed   base32(prefix 'S'+kind, 32-byte ed25519 seed, crc16)  "SU..." for a user
  public base32(prefix kind, 32-byte public key, crc16)         "U..." for a user
  JWT    base64url(header).base64url(claims).base64url(ed25519 signature)
Writes:
  operator.jwt        the operator (nats-server: operator:)
  account.pub/.jwt    the account, JetStream enabled (resolver_preload)
  system.pub/.jwt     the system account JetStream needs in operator mode
  user.creds          a user of that account: JWT + seed (OUTBOX_NATS_CREDS)
  wrong.creds         a user signed by an account the server does not know
  nkey.seed/.pub      a plain NKey user (authorization users: [{nkey: ...}])
  wrong-nkey.seed     an NKey user the server does not know
Usage: mint_nats_keys.py DIR (kept if DIR/done is younger than 7 days).
"""
import base64
import hashlib
import json
import os
import shutil
import sys
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization

PREFIX = {"operator": 14 << 3, "account": 0, "user": 20 << 3}
SEED = 18 << 3


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def b32(data):
    return base64.b32encode(data).decode().rstrip("=")


def with_crc(raw):
    return raw + crc16(raw).to_bytes(2, "little")


class Key:
    def __init__(self, kind):
        self.kind = kind
        self.raw = os.urandom(32)
        self.priv = Ed25519PrivateKey.from_private_bytes(self.raw)
        pub = self.priv.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        p = PREFIX[kind]
        self.public = b32(with_crc(bytes([p]) + pub))
        self.seed = b32(with_crc(bytes([SEED | (p >> 5), (p & 31) << 3]) + self.raw))


def b64(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt(issuer, subject, name, nats):
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name,
              "sub": subject.public, "nats": dict(nats, version=2)}
    body = json.dumps(claims, separators=(",", ":")).encode()
    claims["jti"] = b32(hashlib.new("sha512_256", body).digest())
    header = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = issuer.priv.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{b64(signature)}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
             "wildcards": True, "conn": -1, "leaf": -1,
             "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def creds(user_jwt, seed):
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def main(out):
    done = os.path.join(out, "done")
    if os.path.exists(done) and time.time() - os.path.getmtime(done) < 7 * 86400:
        return
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    operator = Key("operator")
    account, stranger = Key("account"), Key("account")
    write(os.path.join(out, "operator.jwt"),
          jwt(operator, operator, "test-operator", {"type": "operator"}), 0o644)
    system = Key("account")
    write(os.path.join(out, "system.pub"), system.public, 0o644)
    write(os.path.join(out, "system.jwt"),
          jwt(operator, system, "SYS", {"type": "account"}), 0o644)
    write(os.path.join(out, "account.pub"), account.public, 0o644)
    write(os.path.join(out, "account.jwt"),
          jwt(operator, account, "test-account", {"type": "account", "limits": UNLIMITED}), 0o644)
    for name, issuer in (("user", account), ("wrong", stranger)):
        user = Key("user")
        user_jwt = jwt(issuer, user, name, {"type": "user", "pub": {}, "sub": {},
                                            "subs": -1, "data": -1, "payload": -1})
        write(os.path.join(out, f"{name}.creds"), creds(user_jwt, user.seed))
    for name in ("nkey", "wrong-nkey"):
        user = Key("user")
        write(os.path.join(out, f"{name}.seed"), user.seed + "\n")
        write(os.path.join(out, f"{name}.pub"), user.public, 0o644)
    write(os.path.join(out, "done"), "")


if __name__ == "__main__":
    main(sys.argv[1])
