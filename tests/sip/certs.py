"""A throw-away certificate for SIP over TLS tests (bench/tls_cert.py makes it; a missing openssl is a skip here)."""

from __future__ import annotations

from pathlib import Path

from bench import tls_cert
from tests.sip.sipp import require


def self_signed(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(cert_file, key_file): an RSA key and a self-signed certificate for `host` (an IP subjectAltName)."""
    require("openssl")
    return tls_cert.self_signed(folder, host)
