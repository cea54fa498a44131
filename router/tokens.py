"""Random names and ids, made as the secrets module makes them (os.urandom), without importing
it: secrets imports hmac, which sets up OpenSSL's digests, 2 MiB in every router process for
nothing it uses."""

from __future__ import annotations

import base64
import os


def token_bytes(nbytes: int) -> bytes:
    return os.urandom(nbytes)


def token_hex(nbytes: int) -> str:
    return os.urandom(nbytes).hex()


def token_urlsafe(nbytes: int) -> str:
    return base64.urlsafe_b64encode(os.urandom(nbytes)).rstrip(b"=").decode("ascii")
