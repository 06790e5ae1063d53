"""SIP over TLS: the listener's ssl context (TLS 1.2 or newer, the certificate and key of `sip.tls`, client
certificates checked against `ca_file` when given, required with `require_client_cert`), and the one TLS trunks
are dialled with (their certificate and name verified)."""

from __future__ import annotations

import ssl


def server_context(tls) -> ssl.SSLContext:
    """`tls`: gateway.config.SipTlsConfig. Raises ssl.SSLError / OSError when the files do not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # Telnyx and Twilio require 1.2+; older ones are broken
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file is not None:
        ctx.load_verify_locations(cafile=tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def contact_over_tls(value: str) -> str:
    """Our Contact `<sip:host:port>` as `<sip:host:port;transport=tls>`: the peer's in-dialog requests (ACK, BYE)
    then come back over TLS, not UDP to the TLS port (RFC 3261 §8.1.1.8, §19.1.4)."""
    if value.startswith("<sip:") and value.endswith(">") and "transport=" not in value:
        return value[:-1] + ";transport=tls>"
    return value


def client_context(tls, trunk_ca_file: str | None) -> ssl.SSLContext:
    """The context a TLS trunk is dialled with: TLS 1.2 or newer, the trunk's certificate verified against
    `trunk_ca_file`, else `sip.tls.ca_file`, else the system's CAs, and its name checked against the host we dial
    (SNI too). Our own certificate goes along for trunks that ask for one (mutual TLS). `tls`: SipTlsConfig."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=trunk_ca_file or tls.ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


def failure(exc: BaseException) -> str:
    """Why a TLS connection failed, in words for the log and `call.failed`'s reason: the verification error when
    the certificate did not verify (expired, unknown CA, a name mismatch), else the error as it came."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    return str(exc) or type(exc).__name__
