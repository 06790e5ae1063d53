"""Session timers (RFC 4028) as decisions, pure: what to answer an INVITE's Session-Expires/Min-SE with (or 422),
what to offer on an outbound INVITE and how to retry after a 422, who refreshes, when to refresh and when to give
the call up. Sockets and clocks are elsewhere (gateway/sip/session_clock.py, in_dialog.py).

Carriers that use session timers drop a call whose refreshes never come; and a call whose far end vanished
without a BYE is only found dead this way. The refresher sends a re-INVITE or UPDATE at half the interval; the
other side gives the call up (BYE) when none arrived by the interval less min(32 s, interval/3) (§10).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

RFC_MIN_SE = 90  # §4: no Min-SE below 90 s
MAX_INTERVAL = 86400  # a longer Session-Expires or Min-SE is taken as this: a day between refreshes is plenty
Headers = Iterable[tuple[str, str]]
COMPACT = {"x": "session-expires", "k": "supported"}
_DELTA = re.compile(r"\d{1,10}")


@dataclass(frozen=True)
class Agreement:
    """A dialog's session timer: `interval` seconds; `we_refresh` says which side refreshes; `refresh_with` is
    the method we refresh with (UPDATE when the peer allows it, else re-INVITE)."""

    interval: int
    we_refresh: bool
    refresh_with: str = "UPDATE"

    @property
    def refresh_after_s(self) -> float:
        """When we refresh (if we are the refresher), counted from the last refresh."""
        return self.interval / 2

    @property
    def give_up_after_s(self) -> float:
        """When the call is given up (BYE) if the peer, the refresher, has not refreshed (RFC 4028 §10)."""
        return self.interval - min(32, self.interval / 3)


@dataclass(frozen=True)
class Refusal:
    """Answer the request with this status instead: 422 (interval too small, with our Min-SE) or 400."""

    status: int
    reason: str
    headers: dict[str, str]


@dataclass(frozen=True)
class Answer:
    """Accept the request: `agreement` is None when the call runs without a session timer; `headers` go on
    the 2xx (Session-Expires, and Require: timer when the caller supports it)."""

    agreement: Agreement | None
    headers: dict[str, str]


@dataclass(frozen=True)
class SessionTimerPolicy:
    """Ours: the interval we ask for and the smallest we accept (sip.session_expires_s and sip.min_se_s)."""

    session_expires: int = 1800
    min_se: int = RFC_MIN_SE

    def __post_init__(self):
        if not RFC_MIN_SE <= self.min_se <= self.session_expires <= MAX_INTERVAL:
            raise ValueError(
                f"session timers: need {RFC_MIN_SE} <= min_se ({self.min_se}) <= session_expires "
                f"({self.session_expires}) <= {MAX_INTERVAL}"
            )

    # -- we answer (inbound INVITE, or a re-INVITE/UPDATE refreshing the session) ------------------------------

    def answer(self, request: Headers) -> Answer | Refusal:
        """RFC 4028 §9 for a request's headers."""
        h = _read(request)
        try:
            offered, refresher = _session_expires(h.get("session-expires"))
            their_min_se = _delta(h.get("min-se")) if h.get("min-se") else RFC_MIN_SE
        except ValueError as e:
            return Refusal(400, str(e), {})
        supports = "timer" in _tokens(h.get("supported", "")) | _tokens(h.get("require", ""))
        if offered is not None and offered < self.min_se:
            return Refusal(422, "Session Interval Too Small", {"Min-SE": str(self.min_se)})
        floor = max(self.min_se, their_min_se)
        # we may lower a long interval to ours, never below the caller's Min-SE (§9)
        interval = max(floor, min(offered, self.session_expires)) if offered else max(floor, self.session_expires)
        if refresher is None:
            # the caller that supports timers gets the refresh work; one that does not cannot do it (Table 2)
            refresher = "uac" if supports else "uas"
        can_update = _allows_update(h.get("allow"))
        headers = {"Session-Expires": f"{interval};refresher={refresher}"}
        if supports:
            headers["Require"] = "timer"
        return Answer(Agreement(interval, refresher == "uas", "UPDATE" if can_update else "INVITE"), headers)

    # -- we offer (outbound INVITE) -------------------------------------------------------------------------------

    def offer(self, asked_min_se: int | None = None) -> dict[str, str]:
        """Headers for an outbound INVITE; `asked_min_se`: the Min-SE a 422 asked for (see `after_422`), which
        the retry carries as its Min-SE and at least as its Session-Expires (§7.1)."""
        floor = max(self.min_se, asked_min_se or 0)
        interval = max(self.session_expires, floor)
        return {"Supported": "timer", "Session-Expires": str(interval), "Min-SE": str(floor)}

    def after_422(self, response: Headers, offered: int) -> int | None:
        """The Min-SE to retry with after a 422 to an INVITE that offered `offered` seconds, or None to give up
        (no usable Min-SE, or one not larger than what we offered: retrying would get the same 422)."""
        try:
            wanted = _delta(_read(response).get("min-se", ""))
        except ValueError:
            return None
        return min(wanted, MAX_INTERVAL) if wanted > offered else None

    def agreed(self, response: Headers) -> Agreement | None:
        """The session timer a 2xx to our INVITE set (None: the callee runs none, §7.2)."""
        h = _read(response)
        try:
            interval, refresher = _session_expires(h.get("session-expires"))
        except ValueError:
            return None
        if not interval:
            return None
        # never below the Min-SE we sent (§9 forbids the callee to go lower): a 2xx naming 1 s would have us
        # refresh twice a second for the whole call
        interval = max(interval, self.min_se)
        # a 2xx must name the refresher; if it does not, refreshing ourselves is the side that cannot drop the call
        we_refresh = refresher != "uas"
        return Agreement(interval, we_refresh, "UPDATE" if _allows_update(h.get("allow")) else "INVITE")


def engaged(answer: Answer, request: Headers) -> Agreement | None:
    """The timer an inbound call runs, from `SessionTimerPolicy.answer`: None when the INVITE asked for none (no
    Session-Expires: RFC 4028 §9 lets the UAS add one, we do not impose refreshes on a caller that did not ask).
    Where we refresh, we do it with UPDATE when the caller's Allow lists it, else with a re-INVITE offering our
    SDP again (gateway/sip/in_dialog.py)."""
    if answer.agreement is None or "session-expires" not in _read(request):
        return None
    return answer.agreement


def _read(headers: Headers) -> dict[str, str]:
    """Headers by lower-case name (compact forms expanded); repeated ones joined with commas."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.strip().lower()
        key = COMPACT.get(key, key)
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _delta(text: str) -> int:
    text = text.strip()
    if not _DELTA.fullmatch(text):
        raise ValueError(f"Bad delta-seconds {text[:20]!r}")
    return min(int(text), MAX_INTERVAL)


def _session_expires(value: str | None) -> tuple[int | None, str | None]:
    """`1800;refresher=uac` as (1800, "uac"); an absent header as (None, None); ValueError when malformed."""
    if value is None:
        return None, None
    interval, *params = value.split(";")
    try:
        seconds = _delta(interval)
    except ValueError:
        raise ValueError(f"Bad Session-Expires {value[:40]!r}") from None
    refresher = None
    for param in params:
        name, _, val = param.partition("=")
        if name.strip().lower() == "refresher":
            refresher = val.strip().lower()
            if refresher not in ("uac", "uas"):
                raise ValueError(f"Bad Session-Expires refresher {val.strip()[:20]!r}")
    return seconds, refresher


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


def _allows_update(allow: str | None) -> bool:
    """Whether the peer takes UPDATE: an Allow that lists it (no Allow at all tells nothing; we re-INVITE)."""
    return allow is not None and "update" in _tokens(allow)
