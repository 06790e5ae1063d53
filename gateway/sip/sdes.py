"""SDES (RFC 4568): the `a=crypto` lines of an SRTP offer and answer, pure. Two suites, the ones every trunk
offers: AES_CM_128_HMAC_SHA1_80 and, when a peer offers only that, AES_CM_128_HMAC_SHA1_32.

Each side's line carries the key *it* encrypts with: we protect what we send with the key in our SDP and
unprotect what we receive with the key in the peer's. One key per line, no MKI and no session parameters but WSH:
we do not re-key during a call, so a line asking for that is refused (and the next line offered tried).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass

SUITES = ("AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32")  # preferred first
KEY_LEN, SALT_LEN = 16, 14  # AES-128 master key and 112-bit master salt (RFC 3711 §8.2)
MAX_LIFETIME = 2**48  # RFC 4568 §6.2.1: the suites' SRTP limit
MIN_LIFETIME = 2**20  # we never re-key: a shorter lifetime (2^20 is 5.8 hours of 20 ms packets) is refused
MAX_LINE = 1024
_LINE = re.compile(r"(\d{1,10})\s+(\S+)\s+(\S+)(?:\s+(.*))?")


SECURE_PROTOS = ("RTP/SAVP", "RTP/SAVPF")
MODES = ("off", "optional", "required")


class SdesError(ValueError):
    """An `a=crypto` line or offer we cannot use; `code` is stable: malformed, unsupported_suite,
    unsupported_lifetime, unsupported_mki, unsupported_session_params, no_acceptable_crypto, srtp_required,
    srtp_off, answer_mismatch. Every one is answered 488 Not Acceptable Here when it refuses an offer."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Crypto:
    """One `a=crypto` line: `tag suite inline:<base64 key||salt>[|lifetime]`."""

    tag: int
    suite: str
    key: bytes  # 16 bytes
    salt: bytes  # 14 bytes
    lifetime: int | None = None

    @property
    def master_key(self) -> bytes:
        """Key then salt, as libsrtp takes them."""
        return self.key + self.salt

    def to_sdp(self) -> str:
        """The attribute's value (what follows `a=crypto:`)."""
        inline = base64.b64encode(self.master_key).decode()
        lifetime = ""
        if self.lifetime:
            power = self.lifetime.bit_length() - 1
            lifetime = f"|2^{power}" if self.lifetime == 2**power else f"|{self.lifetime}"
        return f"{self.tag} {self.suite} inline:{inline}{lifetime}"


def generate(suite: str, tag: int = 1) -> Crypto:
    """A fresh random key for `suite`."""
    if suite not in SUITES:
        raise SdesError("unsupported_suite", f"crypto suite {suite!r} (we use {', '.join(SUITES)})")
    material = os.urandom(KEY_LEN + SALT_LEN)
    return Crypto(tag, suite, material[:KEY_LEN], material[KEY_LEN:])


def parse(value: str) -> Crypto:
    """One `a=crypto` value (without `a=crypto:`); SdesError says why we cannot use it."""
    value = value.strip()
    if len(value) > MAX_LINE:
        raise SdesError("malformed", f"a=crypto line of {len(value)} bytes")
    m = _LINE.fullmatch(value)
    if m is None:
        raise SdesError("malformed", f"a=crypto {value[:64]!r} is not 'tag suite key-params'")
    tag, suite, key_params, session_params = int(m.group(1)), m.group(2), m.group(3), m.group(4)
    if suite not in SUITES:
        raise SdesError("unsupported_suite", f"crypto suite {suite[:40]!r} (we use {', '.join(SUITES)})")
    if ";" in key_params:
        raise SdesError("unsupported_mki", "several keys in one a=crypto line (each needs an MKI; we use none)")
    if session_params and any(not p.startswith("WSH=") for p in session_params.split()):
        raise SdesError("unsupported_session_params", f"a=crypto session parameters {session_params[:64]!r}")
    method, _, info = key_params.partition(":")
    if method != "inline":
        raise SdesError("malformed", f"a=crypto key method {method[:16]!r} (only inline exists)")
    fields = info.split("|")
    if len(fields) > 3:
        raise SdesError("malformed", f"a=crypto key {info[:64]!r} has too many '|' fields")
    try:
        material = base64.b64decode(fields[0], validate=True)
    except (binascii.Error, ValueError):
        raise SdesError("malformed", "a=crypto key is not base64") from None
    if len(material) != KEY_LEN + SALT_LEN:
        raise SdesError("malformed", f"a=crypto key of {len(material)} bytes (the suite's is {KEY_LEN + SALT_LEN})")
    lifetime, mki = None, None
    for field in fields[1:]:
        if ":" in field:
            mki = field
        elif lifetime is None and mki is None:
            lifetime = _lifetime(field)
        else:
            raise SdesError("malformed", f"a=crypto key field {field[:32]!r} out of place")
    if mki is not None:
        raise SdesError("unsupported_mki", f"a=crypto MKI {mki[:32]!r} (we use one key per call, no MKI)")
    return Crypto(tag, suite, material[:KEY_LEN], material[KEY_LEN:], lifetime)


def _lifetime(text: str) -> int:
    if not re.fullmatch(r"(2\^)?\d{1,20}", text):
        raise SdesError("malformed", f"a=crypto lifetime {text[:32]!r}")
    # an exponent is bounded before it is raised: 2^999999999 would be a 125 MB integer
    value = 2 ** min(int(text[2:]), 64) if text.startswith("2^") else int(text)
    if not MIN_LIFETIME <= value <= MAX_LIFETIME:
        raise SdesError("unsupported_lifetime", f"a=crypto lifetime {text[:32]} (we take 2^20..2^48: we do not re-key)")
    return value


def choose(offered: list[str]) -> Crypto:
    """The line of an offer we answer: the first usable AES_CM_128_HMAC_SHA1_80, else the first usable _32.
    SdesError("no_acceptable_crypto") names the first reason when none is usable."""
    usable: list[Crypto] = []
    reasons: list[str] = []
    for value in offered:
        try:
            usable.append(parse(value))
        except SdesError as e:
            reasons.append(str(e))
    for suite in SUITES:
        for crypto in usable:
            if crypto.suite == suite:
                return crypto
    why = reasons[0] if reasons else "no a=crypto line"
    raise SdesError("no_acceptable_crypto", f"no usable SRTP key offered ({why})")


def answer(offer: Crypto) -> Crypto:
    """Our line answering `offer`: its tag and suite, our own fresh key (RFC 4568 §5.1.2)."""
    return generate(offer.suite, offer.tag)


def answer_offer(mode: str, proto: str, offered: list[str]) -> tuple[Crypto, Crypto] | None:
    """SRTP for an offer's audio stream (its m= `proto` and `a=crypto` values) under `mode` (off, optional,
    required): (our line, the peer's) to answer with RTP/SAVP, None to answer plain RTP/AVP, or SdesError
    (answer 488). The answer keeps the offer's proto (RFC 3264), so an RTP/SAVP offer is refused with SRTP off
    and an RTP/AVP offer with SRTP required; a=crypto lines in an RTP/AVP offer ("best effort") are ignored."""
    if mode not in MODES:
        raise ValueError(f"srtp mode {mode!r} (one of {', '.join(MODES)})")
    secure = proto.upper() in SECURE_PROTOS
    if not secure:
        if mode == "required":
            raise SdesError("srtp_required", f"the offer is plain RTP ({proto[:20]}) and SRTP is required")
        return None
    if mode == "off":
        raise SdesError("srtp_off", f"the offer is SRTP ({proto[:20]}) and SRTP is off")
    remote = choose(offered)
    return answer(remote), remote


def offer() -> list[Crypto]:
    """Our offer's lines (with m= RTP/SAVP): both suites, the preferred first, each its own key."""
    return [generate(suite, tag) for tag, suite in enumerate(SUITES, start=1)]


def answered(ours: list[Crypto], values: list[str]) -> tuple[Crypto, Crypto]:
    """(our line, the peer's) from the answer to our offer: exactly one line, naming a tag and suite we offered."""
    if len(values) != 1:
        raise SdesError("answer_mismatch", f"the answer carries {len(values)} a=crypto lines (one expected)")
    remote = parse(values[0])
    for local in ours:
        if (local.tag, local.suite) == (remote.tag, remote.suite):
            return local, remote
    raise SdesError("answer_mismatch", f"the answer's a=crypto tag {remote.tag} {remote.suite} was not offered")


def answer_over(over_tls: bool, mode: str, proto: str, offered: list[str]) -> tuple[Crypto, Crypto] | None:
    """`answer_offer` for a call that came over TLS or not: keys in an SDP over plain SIP are anyone's to read, so
    an SRTP offer there is refused whatever `mode` says, and `required` still refuses a plain one."""
    if not over_tls and proto.upper() in SECURE_PROTOS:
        raise SdesError("srtp_needs_tls", "an SRTP offer over plain SIP (its keys travel in clear text): use TLS")
    return answer_offer(mode, proto, offered)


def answer_keys(mode: str, ours: list[Crypto], proto: str, values: list[str]) -> tuple[Crypto, Crypto] | None:
    """The keys of the answer to our offer (a trunk's `srtp` `mode`, our offered lines `ours`, the answer's m= `proto`
    and `a=crypto` values): (our line, the peer's), None for plain RTP (`optional` answered without a key), or
    SdesError: `srtp_required` (no key, or plain RTP/AVP, where SRTP is required or the answer says RTP/SAVP) or
    `answer_mismatch` (not exactly one line, or one we did not offer)."""
    secure = proto.upper() in SECURE_PROTOS
    if mode == "required" and not secure:
        raise SdesError("srtp_required", f"the answer is plain RTP ({proto[:20]}) and the trunk requires SRTP")
    if not values:
        if secure:
            raise SdesError("srtp_required", f"the answer ({proto[:20]}) carries no a=crypto key")
        return None
    return answered(ours, values)


def same_protection(keyed: bool, proto: str, offered: list[str]) -> bool:
    """Whether a new offer in a call (re-INVITE, UPDATE) keeps its protection: a call with SRTP keys (`keyed`)
    stays SRTP (RTP/SAVP, or RTP/AVP with `a=crypto` lines: an `optional` trunk's best-effort SRTP, RFC 4568's
    "best effort" use of RTP/AVP); a plain call stays plain (RTP/AVP; `a=crypto` lines in it are ignored, as in
    the first offer). We do not re-key: the keys of the first offer and answer hold for the call."""
    secure = proto.upper() in SECURE_PROTOS
    return (secure or bool(offered)) if keyed else not secure
