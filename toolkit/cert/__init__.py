"""Handover certificates: per node, signed evidence that a customer can verify offline.

A certificate is one file, ``<run>/certs/<host>.cert`` (docs/certificates.md): the canonical
JSON document (``document``: the schema, ``format: gpunode-cert``, ``version: 2``) followed by
an OpenSSH signature of exactly those bytes (``ssh-keygen -Y sign -n gpunode-cert``) in
OpenSSH's own armor (``signature``). Only nodes an acceptance run found ready get one: the
schema allows no other verdict and no failed check, so a certificate cannot say "not ready".

Signing and verifying are ``ssh-keygen``'s; this package only frames its input and output.
What it adds is strictness around the framing: the document must be in its canonical form and
the armor byte for byte what OpenSSH writes, so that a change of any single byte of the file
(even one that OpenSSH's base64 reader would skip, such as a newline turned into a space)
makes verification fail and say why (``verify``). ``compare`` says what differs between two.

This file only names the package's interface; each name lives in one of the four modules.
"""

from toolkit.cert.compare import Difference, compare
from toolkit.cert.document import (
    FOLDER,
    FORMAT,
    VERSION,
    CertError,
    Certificate,
    build,
    file_sha256,
    render,
    validate_document,
)
from toolkit.cert.signature import (
    NAMESPACE,
    SIGN_KEY_VAR,
    SignKey,
    armor_of,
    fingerprint,
    sign,
    sign_key_from,
    split,
    write,
)
from toolkit.cert.verify import Verification, latest, load, parse, read, show, summary, verify

__all__ = [
    "FOLDER",
    "FORMAT",
    "NAMESPACE",
    "SIGN_KEY_VAR",
    "VERSION",
    "CertError",
    "Certificate",
    "Difference",
    "SignKey",
    "Verification",
    "armor_of",
    "build",
    "compare",
    "file_sha256",
    "fingerprint",
    "latest",
    "load",
    "parse",
    "read",
    "render",
    "show",
    "sign",
    "sign_key_from",
    "split",
    "summary",
    "validate_document",
    "verify",
    "write",
]
