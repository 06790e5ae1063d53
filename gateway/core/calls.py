"""The call registry: joins a telephony media leg and a control socket by the call's id (docs/protocol.md).

Either side may come first. A control socket's `call.attach` creates the
session at once; it joins the shared clock only when the media leg connects
(before that, nothing could hear it: audio waits in the playout). A media leg
that comes first creates the session with its own voice settings; the
control socket attaches to it later. A call whose media leg never comes ends
with `unknown_call`; when the media leg ends, the call ends.

A call has several ids (Twilio: streamSid, callSid and a `call_id` custom
parameter; AudioSocket: its UUID); each is an alias of the same call.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from audio.encode import OutputFormat
from gateway import protocol as P
from gateway.core.contracts import ControlLeg, TelephonyLeg
from gateway.core.inbound import InboundAudio, recording_path
from gateway.core.session import Session
from gateway.core.sticky import StickyEvents

log = logging.getLogger("voxgate.calls")

# Both telephony legs carry 8 kHz audio; the session plays PCM16 at 8 kHz and a leg
# that speaks another 8 kHz encoding (Twilio: μ-law) converts each frame itself.
TELEPHONY_PCM = OutputFormat("pcm16", 8000)
MAX_CALL_ID = 128
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def normalize_call_id(call_id: str) -> str:
    """UUIDs compare in their canonical lower-case text; other ids (Twilio SIDs) as given."""
    call_id = call_id.strip()
    if not call_id or len(call_id) > MAX_CALL_ID or not call_id.isprintable():
        raise P.ProtocolError(P.BAD_MESSAGE, f"call_id must be 1..{MAX_CALL_ID} printable characters")
    return call_id.lower() if _UUID.fullmatch(call_id) else call_id


@dataclass
class Call:
    call_id: str  # the first id it was known by
    session: Session
    inbound: InboundAudio
    aliases: set[str] = field(default_factory=set)
    control: ControlLeg | None = None
    media: TelephonyLeg | None = None
    media_kind: str | None = None  # twilio | audiosocket
    media_state: str = "waiting"  # waiting | connected | ended
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    details: dict = field(default_factory=dict)  # the media leg's facts for the agent (SIP: {"sip": {...}})
    barge_in: object = None  # the agent's call.attach.barge_in (gateway.config.BargeInConfig), else the config's

    async def notify(self, event: dict) -> None:
        """An event for the control socket (dtmf, call.media, call.mark, errors of the media leg)."""
        if not self.session.closed:
            self.session.emit(event)
            await self.session.flush_events()

    async def report(self, code: str, message: str) -> None:
        await self.notify(P.error_event(code, message))


class CallRegistry:
    def __init__(self, core):
        self.core = core  # the CallCore that owns this registry (new_session, play, clock, config)
        self._calls: dict[str, Call] = {}  # every alias -> its call
        self.connections: dict[asyncio.Task, Callable[[], Awaitable[None]]] = {}  # socket handlers -> their closers
        self.sticky = StickyEvents()  # an outbound call's progress and outcome, replayed to a late attach

    def __len__(self) -> int:
        return len({id(c) for c in self._calls.values()})

    def ids(self) -> list[str]:
        """Every id of every live call (the call plane keeps their claims alive)."""
        return [i for i, c in self._calls.items() if not c.session.closed]

    def get(self, call_id: str) -> Call | None:
        """The live call known by this id (a call whose session just closed is gone already)."""
        call = self._calls.get(call_id)
        return call if call is not None and not call.session.closed else None

    async def announce(self, call_id: str, event: dict) -> None:
        """An event every agent of the call must see, also one that attaches later (gateway/core/sticky.py)."""
        self.sticky.keep(call_id, event)
        call = self.get(call_id)
        if call is not None:
            await call.notify(event)

    def track(self, close: Callable[[], Awaitable[None]]) -> None:
        """Registers the running socket handler and how to close its socket; `shutdown` uses both."""
        task = asyncio.current_task()
        self.connections[task] = close
        task.add_done_callback(lambda t: self.connections.pop(t, None))

    async def shutdown(self, timeout: float = 3.0) -> None:
        """End every call and close every telephony socket while the server still reads (clean close handshakes)."""
        for call in {id(c): c for c in self._calls.values()}.values():
            if not call.session.closed:
                await call.session.close()
        current = asyncio.current_task()
        pending = {t: close for t, close in self.connections.items() if t is not current}
        for close in pending.values():
            try:
                await close()
            except Exception:
                log.debug("closing a telephony socket failed", exc_info=True)
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    # ------------------------------------------------------------ control side
    async def attach_control(
        self,
        call_id: str,
        leg: ControlLeg,
        voice: str | None = None,
        language: str | None = None,
        instruct: str | None = None,
        barge_in: dict | None = None,
        mode: str | None = None,
        word_timings: bool | None = None,
    ) -> Call:
        """`call.attach`: joins the call, or creates it to wait for its media leg. Sends `call.attached`."""
        from gateway.core.caller_voice import session_settings

        call_id = normalize_call_id(call_id)
        settings = session_settings(self.core.config.barge_in, barge_in) if barge_in is not None else None
        call = self.get(call_id)
        if call is not None and call.control is not None:
            raise P.ProtocolError(P.CALL_BUSY, f"call {call_id!r} already has a control socket")
        ended = call is None and self.sticky.state(call_id) == "ended"  # e.g. an outbound call that failed
        if call is None:
            if not ended:
                self._refuse_new_while_draining()
            session = self.core.new_session("control", voice, language or "auto", instruct, TELEPHONY_PCM)
            call = self._new_call([call_id], session)
            timeout = self.core.config.telephony.unknown_call_timeout_s
            call.timers.append(asyncio.get_running_loop().call_later(timeout, self._unknown_call, call, timeout))
        call.control = leg
        call.session.attach_text(leg)
        call.session.set_mode(mode)
        if word_timings is not None:
            call.session.word_timings = word_timings
        if settings is not None:
            call.barge_in = settings
            if call.media_state == "connected":
                self._listen(call)
        # `voice` says which voice the call speaks with: the media leg's, when it came first.
        call.session.emit(
            {
                "type": "call.attached",
                "call_id": call_id,
                "session_id": call.session.session_id,
                "voice": call.session.voice_name,
                "mode": call.session.mode,
                **({"mode_note": call.session.mode_note} if call.session.mode_note else {}),
                **({"word_timings": True} if call.session.word_timings else {}),
                **call.details,
            }
        )
        for event in self.sticky.replay(call_id):  # what the call said before this agent came
            call.session.emit(event)
        if call.media_state == "connected":
            call.session.emit({"type": "call.media", "state": "connected", "leg": call.media_kind, **call.details})
        await call.session.flush_events()
        if ended:  # the agent learns how the call ended, then the session ends (as for an agent that was there)
            await call.session.close()
        return call

    async def detach_control(self, call: Call, leg: ControlLeg) -> None:
        """The control socket closed. The call goes on while its media leg lives (an agent may re-attach)."""
        if call.control is not leg:
            return
        call.control = None
        call.session.attach_text(None)
        if call.media_state != "connected" and not call.session.closed:
            await call.session.close()

    def _unknown_call(self, call: Call, timeout: float) -> None:
        if self.sticky.state(call.call_id) == "live":  # an outbound call still ringing: its outcome will come
            call.timers.append(asyncio.get_running_loop().call_later(timeout, self._unknown_call, call, timeout))
            return
        if call.media_state == "waiting" and not call.session.closed:
            error = P.error_event(
                P.UNKNOWN_CALL, f"no media leg arrived for call {call.call_id!r} within {timeout:g} s"
            )
            asyncio.get_running_loop().create_task(call.session.close(error))

    # ------------------------------------------------------------ media side
    def connect_media(
        self,
        ids: list[str],
        leg: TelephonyLeg,
        kind: str,
        voice: str | None = None,
        language: str | None = None,
        output: OutputFormat = TELEPHONY_PCM,
        inbound_rate: int = TELEPHONY_PCM.sample_rate,
        details: dict | None = None,
    ) -> Call:
        """A media leg started: join the call one of `ids` names, or start one. The caller flushes events.
        `details` (e.g. SIP's {"sip": {...}}) go into `call.attached` and `call.media` (connected) for the agent.

        `output` and `inbound_rate` apply to a call this leg starts (a wideband wire plays and hears at its
        own rate); a call the agent attached to first keeps 8 kHz, so a leg reads `call.session.output`."""
        ids = list(dict.fromkeys(normalize_call_id(i) for i in ids if i))
        if not ids:
            raise P.ProtocolError(P.BAD_MESSAGE, "the media leg names no call id")
        call = next((c for c in map(self.get, ids) if c is not None), None)
        if call is not None and call.media_state != "waiting":
            raise P.ProtocolError(P.CALL_BUSY, f"call {call.call_id!r} already has a media leg")
        if call is None:
            self._refuse_new_while_draining()
            session = self.core.new_session(kind, voice, language or "auto", None, output)
            call = self._new_call(ids, session, inbound_rate)
        else:
            for timer in call.timers:
                timer.cancel()
            call.timers.clear()
            for i in ids:
                if self.get(i) is None:
                    self._calls[i] = call
                    call.aliases.add(i)
            if self.core.cluster is not None:  # the media leg's own ids (callSid, streamSid) are this call's too
                self.core.cluster.keep(ids)
        call.media, call.media_kind, call.media_state = leg, kind, "connected"
        call.details = call.session.call_details = dict(details or {})
        call.session.attach_media(leg)
        self.core.play(call.session)
        call.session.emit({"type": "call.media", "state": "connected", "leg": kind, **call.details})
        self._listen(call)
        log.info("call %s: %s media connected (session %s)", call.call_id, kind, call.session.session_id)
        return call

    async def end_media(self, call: Call, reason: str) -> None:
        """The media leg ended (hangup, stop, disconnect): the call is over."""
        if call.media_state == "ended":
            return
        call.media_state = "ended"
        session = call.session
        session.detach_media()
        self.core.clock.remove(session)
        log.info("call %s: media ended (%s)", call.call_id, reason)
        if not session.closed:
            session.emit({"type": "call.media", "state": "ended", "reason": reason})
            await session.close()

    # ------------------------------------------------------------ internals
    def _refuse_new_while_draining(self) -> None:
        """A draining node of a cluster finishes its calls (their late legs still join) but starts none."""
        if self.core.draining:
            raise P.ProtocolError(
                P.SHUTTING_DOWN, "this gateway is draining: it finishes its calls and starts no new ones"
            )

    def _listen(self, call: Call) -> None:
        """The caller's voice: detection and barge-in on the call's inbound audio (AudioSocket's buffer is ours to pause)."""
        self.core.voice.attach(call.session, call.inbound, call.barge_in, owns_buffer=call.media_kind == "audiosocket")

    def _new_call(self, ids: list[str], session: Session, inbound_rate: int = TELEPHONY_PCM.sample_rate) -> Call:
        wav = recording_path(self.core.config.telephony.record_inbound_dir, ids[0], session.session_id)
        call = Call(ids[0], session, InboundAudio(inbound_rate, wav), aliases=set(ids))
        session.inbound = call.inbound
        for i in ids:
            self._calls[i] = call
        asyncio.get_running_loop().create_task(self._reap(call), name=f"call-{ids[0]}")
        return call

    async def _reap(self, call: Call) -> None:
        """When the session ends for any reason, end both legs and forget the call."""
        await call.session.wait_closed()
        self.sticky.end(call.aliases)
        for timer in call.timers:
            timer.cancel()
        for i in call.aliases:
            if self._calls.get(i) is call:
                del self._calls[i]
        if self.core.cluster is not None:  # an outbound call's id stays claimed while its outcome is kept
            self.core.cluster.release(i for i in call.aliases if self.sticky.state(i) is None)
        call.inbound.close()
        media, control = call.media, call.control
        if media is not None and call.media_state == "connected":
            call.media_state = "ended"
            self.core.clock.remove(call.session)
            try:
                await media.hangup()
            except Exception:
                log.debug("media hangup failed", exc_info=True)
        if control is not None:
            try:
                await control.close()
            except Exception:
                log.debug("control close failed", exc_info=True)
