"""A throw-away self-signed certificate for SIP over TLS on loopback (the SRTP capacity bench, the SIP tests),
made with the openssl command line (Debian's `openssl`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def self_signed(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(cert_file, key_file) in `folder`: an RSA key and a self-signed certificate for `host` (an IP
    subjectAltName), which is also the CA file a client verifies the listener with."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed (it makes the TLS certificate): apt-get install openssl")
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key), "-out", str(cert)]
        + ["-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}"],
        check=True,
        capture_output=True,
    )
    return cert, key
