#!/usr/bin/env python3
"""Every ```conf block of the given docs loads with `tollgate -t`, as printed.

A block names its files under /etc/tollgate/; this test makes each one in a scratch folder and
points the block there: a policy (`NAME.json`) is the ```json block that follows the text
"with `NAME.json`" in the same document (so the policy printed is the policy loaded), else a
deny-all policy; a certificate and key (`.crt`/`.key`), a CA (`.pem`), a JWKS (`.jwks`) and
a secret file are made for the test. Nothing else changes: a directive misspelt in the docs, a
value out of range, or a policy that does not compile fails the test with tollgate's own error.

Usage: docs-confs.py TOLLGATE DOC.md...
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def blocks(text):
    """(kind, body, index) of each fenced block."""
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        yield m.group(1), m.group(2), m.start()


def make_cert(d, name):
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    if not os.path.exists(crt):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=127.0.0.1"],
                       check=True, capture_output=True)
    return crt, key


def b64url(b):
    import base64
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def make_jwks(path):
    """A JWKS with one EC P-256 public key (its x and y read from openssl's text form)."""
    d = os.path.dirname(path)
    key = os.path.join(d, "jwks-ec.key")
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key],
                   check=True, capture_output=True)
    txt = subprocess.run(["openssl", "ec", "-in", key, "-text", "-noout"], check=True, capture_output=True,
                         text=True).stdout
    pub = re.search(r"pub:\s*\n((?:\s+[0-9a-f:]+\n)+)", txt).group(1)
    raw = bytes.fromhex(re.sub(r"[\s:]", "", pub))
    assert raw[0] == 4 and len(raw) == 65
    with open(path, "w") as f:
        json.dump({"keys": [{"kty": "EC", "crv": "P-256", "x": b64url(raw[1:33]), "y": b64url(raw[33:]),
                             "kid": "docs", "alg": "ES256", "use": "sig"}]}, f)


def main():
    tg = sys.argv[1]
    fails = n = 0
    for doc in sys.argv[2:]:
        text = open(doc).read()
        all_blocks = list(blocks(text))
        policies = {}
        for kind, body, at in all_blocks:
            if kind != "json":
                continue
            before = text[max(0, at - 400):at]
            m = re.findall(r"with `([\w.-]+\.json)`", before)
            if m:
                policies[m[-1]] = body
        for i, (kind, body, at) in enumerate(all_blocks):
            if kind != "conf":
                continue
            n += 1
            line = text.count("\n", 0, at) + 1
            with tempfile.TemporaryDirectory() as d:
                conf = body
                for ref in sorted(set(re.findall(r'"/etc/tollgate/([^"]+)"', body))):
                    p = os.path.join(d, ref)
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    base = os.path.basename(ref)
                    if base.endswith(".json"):
                        with open(p, "w") as f:
                            f.write(policies.get(base, '{"version": "1", "default": "deny"}\n'))
                    elif base.endswith(".crt") or base.endswith(".pem"):
                        crt, _ = make_cert(d, "docs-tls")
                        os.link(crt, p) if not os.path.exists(p) else None
                    elif base.endswith(".key"):
                        _, key = make_cert(d, "docs-tls")
                        os.link(key, p) if not os.path.exists(p) else None
                    elif base.endswith(".jwks"):
                        make_jwks(p)
                    else:  # a secret
                        with open(p, "w") as f:
                            f.write("docs-example-secret\n")
                        os.chmod(p, 0o600)
                    conf = conf.replace('"/etc/tollgate/%s"' % ref, '"%s"' % p)
                cf = os.path.join(d, "tollgate.conf")
                with open(cf, "w") as f:
                    f.write(conf)
                r = subprocess.run([tg, "-t", "-c", cf], capture_output=True, text=True, timeout=30,
                                   env={**os.environ, "CLIENT_SECRET": "docs"})
                if r.returncode != 0:
                    fails += 1
                    print("not ok %d - %s:%d: tollgate -t refuses the block" % (n, doc, line))
                    for l in (r.stdout + r.stderr).splitlines():
                        print("  " + l)
                else:
                    print("ok %d - %s:%d loads" % (n, doc, line))
    if n == 0:
        print("not ok - no ```conf block found")
        return 1
    print("%d blocks, %d failed" % (n, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
