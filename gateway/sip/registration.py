"""`sip.register`: bind each account at its registrar (digest auth, refreshed before it expires), so a provider that
sends calls to a registered contact finds this gateway. Failures are logged, not fatal.

aiosipua sends each REGISTER once and stops for good after a failure or an expiry: over UDP one lost packet (a
registrar not up yet, a dropped datagram, a lost refresh) would leave this gateway unregistered until it restarts.
So a keeper task per account resends while no answer comes (RFC 3261's Timer E: 0.5 s doubling to 4 s); after
32 s without one (Timer F), a failure or an expiry, it registers again every `REGISTER_RETRY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from aiosipua import Registration, SipDigestAuth

from gateway.config import sip_registrar

log = logging.getLogger("voxgate.sip")

REGISTER_RESEND_FIRST_S, REGISTER_RESEND_MAX_S, REGISTER_NO_ANSWER_S = 0.5, 4.0, 32.0
REGISTER_RETRY_S = 30.0


async def register_all(uac, entries, user_agent: str) -> tuple[list[Registration], list[asyncio.Task]]:
    """Each `sip.register` entry registered through `uac` (the UDP door's client), with its keeper task."""
    loop = asyncio.get_running_loop()
    registrations: list[Registration] = []
    keepers: list[asyncio.Task] = []
    for entry in entries:
        host, port = sip_registrar(entry.server)
        try:
            info = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_DGRAM)
        except OSError as exc:
            log.warning("sip: registrar %s: cannot resolve %s (%s); not registered", entry.server, host, exc)
            continue
        password = os.environ.get(entry.password_env) if entry.password_env else None
        reg = Registration(
            uac,
            f"sip:{entry.user}@{host}",
            info[0][4][:2],
            expires=entry.expires,
            auth=SipDigestAuth(entry.user, password) if password else None,
            user_agent=user_agent,
        )
        reg.on_registered = lambda r: log.info("sip: registered %s for %d s", r.aor, r.granted_expires)
        reg.on_failed = lambda r, status, reason: log.warning(
            "sip: registration of %s failed: %d %s", r.aor, status, reason
        )
        reg.on_expired = lambda r: log.warning("sip: registration of %s expired", r.aor)
        reg.register()
        registrations.append(reg)
        keepers.append(loop.create_task(keep_registered(reg, entry.server)))
    return registrations, keepers


async def keep_registered(reg: Registration, server: str) -> None:
    """Send the REGISTER again while it goes unanswered, and register again after a failure or an expiry."""
    resend, unanswered = REGISTER_RESEND_FIRST_S, 0.0
    while True:
        state = reg.state.value
        if state == "registering":
            await asyncio.sleep(resend)
            if reg.state.value != "registering":
                resend, unanswered = REGISTER_RESEND_FIRST_S, 0.0
                continue
            unanswered += resend
            resend = min(2 * resend, REGISTER_RESEND_MAX_S)
            if unanswered >= REGISTER_NO_ANSWER_S:
                log.warning("sip: registrar %s has not answered in %.0f s; trying again later", server, unanswered)
                await asyncio.sleep(REGISTER_RETRY_S)
                resend, unanswered = REGISTER_RESEND_FIRST_S, 0.0
            reg.register()
        elif state in ("failed", "expired"):
            await asyncio.sleep(REGISTER_RETRY_S)
            if reg.state.value in ("failed", "expired"):
                log.info("sip: registering %s again at %s", reg.aor, server)
                reg.register()
        else:  # registered (aiosipua refreshes it) or unregistered at our stop
            await asyncio.sleep(1.0)
