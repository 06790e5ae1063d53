"""`RemoteEngine`: the whole `tts.Engine` interface over one or more engine processes.

Placement: a request goes to the serving engine (up, healthy, not draining,
queue not full) with the least pressure, (active + queued + placed since its
last report) / slots, from the load each engine reports every quarter
heartbeat. A session sticks to its engine while that engine serves (its voice
caches stay warm): the session is the first part of the request's `tag`
(`session/turn/chunk`, as the gateway writes it). A request an engine refuses
before any audio (`overloaded`, `draining`) moves to the next engine; only
when every engine refuses does the caller get `overloaded`. An engine that
drops fails its streams with `engine_error` at once (the sessions go on; their
next chunk lands elsewhere); one that comes back is used again by itself.

Cloned voices are kept here and sent to every engine, also to one that
connects (or restarts) later, before it takes requests.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time
import uuid

from tts.engine import Engine, EngineError, SynthesisRequest, SynthesisStream, TurnStream, VoiceClone
import tts.service.wire as W
from tts.service.link import EngineLink
from tts.service.transport import Transport, check_endpoint, needs_secret

log = logging.getLogger("voxgate.engine.remote")

AFFINITY_LIMIT = 65_536  # sessions remembered for stickiness (oldest forgotten first)


def affinity_key(request: SynthesisRequest) -> str:
    """The session a request belongs to, from its tag (`session/turn/chunk`); empty: no stickiness."""
    return request.tag.partition("/")[0] if "/" in request.tag else ""


class RemoteEngine(Engine):
    name = "remote"

    def __init__(
        self,
        endpoints: list[str],
        secret: bytes | None = None,
        connect_timeout_s: float = 5.0,
        discovered: bool = False,
    ):
        if not endpoints and not discovered:
            raise ValueError("a remote engine needs at least one endpoint")
        self.discovered = discovered  # engines come and go through set_endpoints (the gateway's engine registry)
        for e in endpoints:
            check_endpoint(e)
        if len(set(endpoints)) != len(endpoints):
            raise ValueError("engine endpoints are listed twice")
        self.endpoints = list(endpoints)
        self.connect_timeout_s = connect_timeout_s
        self._secret = secret
        self.gateway_id = uuid.uuid4().hex[:16]
        self._transport: Transport | None = None
        self.links: list[EngineLink] = []
        self._affinity: collections.OrderedDict[str, EngineLink] = collections.OrderedDict()
        self._clones: dict[str, VoiceClone] = {}
        self._unusable: dict[str, str] = {}  # registered engines this gateway cannot use, and why
        self._clone_info: dict[str, dict] = {}
        self._replays: set[asyncio.Task] = set()
        self.counters = {"placed": 0, "sticky": 0, "moved": 0, "refused_everywhere": 0, "unavailable": 0}

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._transport = Transport()
        name = f"{socket.gethostname()}:{os.getpid()}"
        for endpoint in self.endpoints:
            link = EngineLink(endpoint, self._transport, self._secret, self.gateway_id, name)
            link.on_up, link.on_down, link.on_refused = self._link_up, self._link_down, self._refused
            self.links.append(link)
            await link.start()
        if not self.links:  # discovered: the registry names the engines as they register
            return
        deadline = time.monotonic() + self.connect_timeout_s
        while not any(link.ready for link in self.links) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.connect_timeout_s > 0 and not any(link.ready for link in self.links):  # 0: the caller waits itself
            log.warning(
                "no engine answered in %.1f s (%s); new sessions are refused with engine_unavailable until one does",
                self.connect_timeout_s,
                "; ".join(f"{l.endpoint}: {l.why_down}" for l in self.links),
            )

    async def set_endpoints(self, endpoints: list[str]) -> None:
        """The engines to use now (a registry found them): links to new ones open, links to gone ones close."""
        for e in endpoints:
            check_endpoint(e)
        if self._transport is None:
            self.endpoints = list(dict.fromkeys(endpoints))
            return
        wanted = set(endpoints)
        self._unusable = {e: why for e, why in self._unusable.items() if e in wanted}
        for link in [l for l in self.links if l.endpoint not in wanted]:
            self.links.remove(link)
            self.endpoints.remove(link.endpoint)
            log.info("engine %s left the registry", link.endpoint)
            await link.close()
        name = f"{socket.gethostname()}:{os.getpid()}"
        for endpoint in dict.fromkeys(endpoints):
            if endpoint not in self.endpoints and needs_secret(endpoint) and not self._secret:
                why = f"needs the shared secret in {W.SECRET_ENV}, which this gateway lacks"
                if self._unusable.get(endpoint) != why:
                    log.warning("engine %s found in the registry %s; not used", endpoint, why)
                self._unusable[endpoint] = why
            elif endpoint not in self.endpoints:
                link = EngineLink(endpoint, self._transport, self._secret, self.gateway_id, name)
                link.on_up, link.on_down, link.on_refused = self._link_up, self._link_down, self._refused
                self.links.append(link)
                self.endpoints.append(endpoint)
                log.info("engine %s found in the registry", endpoint)
                await link.start()

    async def close(self) -> None:
        for task in list(self._replays):
            task.cancel()
        for link in self.links:
            await link.close()
        self.links = []
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # ------------------------------------------------------------ requests
    def synthesize(self, request: SynthesisRequest) -> SynthesisStream:
        stream = SynthesisStream(request, self)
        link = self._choose(affinity_key(request), set())
        stream._placement = (link, link.submit(stream), {link})  # on the stream: nothing to clean up when it ends
        return stream

    # turn mode: over the wire where the engines say so (Welcome.features "turns")
    @property
    def supports_turns(self) -> bool:
        return any(link.serving and W.TURNS in (link.welcome.features if link.welcome else []) for link in self.links)

    def open_turn(self, request: SynthesisRequest) -> TurnStream:
        if not self.supports_turns:
            if not any(link.serving for link in self.links):  # no engine at all: what a sentence chunk gets too
                self.counters["unavailable"] += 1
                raise EngineError("engine_unavailable", self.health() or "no engine serves")
            raise EngineError("unsupported_mode", "no connected engine takes turn-mode streams; use sentence mode")
        stream = TurnStream(request, self)
        link = self._choose(affinity_key(request), set(), turns=True)
        stream._placement = (link, link.submit(stream), {link})
        return stream

    def _turn_append(self, stream: TurnStream, text: str) -> None:
        where = getattr(stream, "_placement", None)
        if where is not None and not stream.done:
            where[0].append_text(where[1], text)

    def _turn_finish(self, stream: TurnStream) -> None:
        where = getattr(stream, "_placement", None)
        if where is not None and not stream.done:
            where[0].finish_turn(where[1])

    def _choose(self, key: str, tried: set, turns: bool = False) -> EngineLink:
        serving = [
            link
            for link in self.links
            if link.serving
            and link not in tried
            and (not turns or W.TURNS in (link.welcome.features if link.welcome else []))
        ]
        candidates = [link for link in serving if not link.full()]
        if not candidates:
            if serving or tried:
                self.counters["refused_everywhere"] += 1
                raise EngineError("overloaded", f"every engine is full ({len(self.links)} configured)")
            self.counters["unavailable"] += 1
            raise EngineError("engine_unavailable", self.health() or "no engine serves")
        self.counters["placed"] += 1
        sticky = self._affinity.get(key) if key else None
        if sticky in candidates:
            self.counters["sticky"] += 1
            self._affinity.move_to_end(key)
            return sticky
        link = min(candidates, key=lambda l: (l.pressure(), l.load.step_ms))
        if key:
            if sticky is not None:
                self.counters["moved"] += 1
            self._affinity[key] = link
            self._affinity.move_to_end(key)
            while len(self._affinity) > AFFINITY_LIMIT:
                self._affinity.popitem(last=False)
        return link

    def _refused(self, link: EngineLink, stream: SynthesisStream, code: str, message: str) -> bool:
        """An engine refused a stream before any audio: place it on one it has not tried, if any serves."""
        where = getattr(stream, "_placement", None)
        if where is None or stream.done:
            return False
        tried = where[2] | {link}
        try:
            other = self._choose(affinity_key(stream.request), tried, turns=isinstance(stream, TurnStream))
        except EngineError:
            return False
        log.info(
            "engine %s refused %s (%s): trying %s",
            link.endpoint,
            stream.request.tag or "a request",
            code,
            other.endpoint,
        )
        stream._placement = (other, other.submit(stream), tried | {other})
        return True

    def _cancel(self, stream: SynthesisStream) -> None:
        where = getattr(stream, "_placement", None)
        if where is not None:
            where[0].cancel(where[1])

    def _update_deadline(self, stream: SynthesisStream, deadline: float) -> None:
        where = getattr(stream, "_placement", None)
        if where is not None and not stream.done:
            where[0].set_deadline(where[1], deadline)

    # ------------------------------------------------------------ links coming and going
    def _link_up(self, link: EngineLink) -> None:
        if not self._clones:
            link.ready = True
            return
        task = asyncio.get_running_loop().create_task(self._replay(link))
        self._replays.add(task)
        task.add_done_callback(self._replays.discard)

    async def _replay(self, link: EngineLink) -> None:
        """Send every cloned voice to an engine that (re)connected, then let it take requests."""
        for voice in list(self._clones.values()):
            try:
                reply = await link.call(_add_voice_msg(voice))
                if not reply.ok:
                    log.error("engine %s refused cloned voice %r: %s", link.endpoint, voice.name, reply.message)
                else:
                    link.welcome.voices = reply.result.get("voices", link.welcome.voices)
            except EngineError as exc:
                log.warning("engine %s: cloned voice %r not sent (%s)", link.endpoint, voice.name, exc.message)
                return  # it went down again; the next Welcome replays
        if link.up:
            link.ready = True

    def _link_down(self, link: EngineLink, why: str) -> None:
        for key in [k for k, l in self._affinity.items() if l is link]:
            del self._affinity[key]

    # ------------------------------------------------------------ voices
    def voices(self) -> list[str]:
        names: set[str] = set()
        for link in self.links:
            if link.welcome is not None:
                names.update(link.welcome.voices)
        return sorted(names)

    @property
    def can_clone(self) -> bool:
        return any(link.welcome is not None and link.welcome.can_clone for link in self.links)

    async def add_voice(self, voice: VoiceClone) -> dict:
        """Every connected engine learns the voice (and every engine that connects later); it is registered
        when one accepts it. With none connected it is kept and sent when one connects."""
        up = [link for link in self.links if link.up]
        if not up:
            self._clones[voice.name] = voice
            info = self._clone_info[voice.name] = {"name": voice.name, "kind": voice.kind, "pending": True}
            return info
        results = await asyncio.gather(*(link.call(_add_voice_msg(voice)) for link in up), return_exceptions=True)
        accepted = [(link, r) for link, r in zip(up, results) if isinstance(r, W.Reply) and r.ok]
        if not accepted:
            refusal = next((r for r in results if isinstance(r, W.Reply)), None)
            if refusal is not None:
                raise EngineError(refusal.code or "internal", refusal.message)
            first = next(r for r in results if isinstance(r, BaseException))
            raise first if isinstance(first, EngineError) else EngineError("engine_error", str(first))
        for link, reply in accepted:
            link.welcome.voices = reply.result.get("voices", link.welcome.voices)
        self._clones[voice.name] = voice
        info = self._clone_info[voice.name] = dict(accepted[0][1].result.get("info") or {"name": voice.name})
        return info

    def remove_voice(self, name: str) -> bool:
        known = self._clones.pop(name, None) is not None
        self._clone_info.pop(name, None)
        for link in self.links:
            if link.up:
                task = asyncio.get_running_loop().create_task(self._remove_on(link, name))
                self._replays.add(task)
                task.add_done_callback(self._replays.discard)
        return known

    async def _remove_on(self, link: EngineLink, name: str) -> None:
        try:
            reply = await link.call(W.RemoveVoice(call=0, name=name))
            if reply.ok and link.welcome is not None:
                link.welcome.voices = reply.result.get("voices", link.welcome.voices)
        except EngineError:
            pass  # down: it forgot every voice anyway, and the replay will not send this one

    def cloned_voices(self) -> list[dict]:
        return list(self._clone_info.values())

    # ------------------------------------------------------------ health and stats
    def health(self) -> str | None:
        if any(link.serving for link in self.links):
            return None
        if not self.links and not self._unusable:
            return (
                "no engine is registered in the call plane" if self.discovered else "the remote engine is not started"
            )
        why = [f"{endpoint}: {reason}" for endpoint, reason in self._unusable.items()]
        for link in self.links:
            if not link.up:
                why.append(f"{link.endpoint}: {link.why_down or 'down'}")
            elif link.load.health:
                why.append(f"{link.endpoint}: {link.load.health}")
            elif link.load.draining:
                why.append(f"{link.endpoint}: draining")
            else:
                why.append(f"{link.endpoint}: connecting")
        return "no engine serves (" + "; ".join(why) + ")"

    def stats(self) -> dict:
        up = [link for link in self.links if link.up]
        out: dict = {
            "queued": sum(l.load.queued for l in up),
            "active": sum(l.load.active for l in up),
            "engines": len(self.links),
            "engines_up": len(up),
            "engines_serving": sum(1 for l in self.links if l.serving),
            "audio_seconds": sum(l.load.stats.get("audio_s", l.load.stats.get("audio_seconds", 0.0)) for l in up),
            **self.counters,
        }
        for name in ("connects", "disconnects", "messages_out", "messages_in", "failed_over", "packets_in", "ops_out"):
            out[f"link_{name}"] = sum(l.counters[name] for l in self.links)
        return out

    def engine_loads(self) -> list[dict]:
        """Per engine: endpoint, state and its last load report (benches, /metrics)."""
        return [
            {
                "endpoint": l.endpoint,
                "up": l.up,
                "serving": l.serving,
                "engine": l.welcome.engine if l.welcome else None,
                "active": l.load.active,
                "queued": l.load.queued,
                "slots": l.load.slots,
                "step_ms": l.load.step_ms,
                "streams": len(l.streams),
            }
            for l in self.links
        ]


def _add_voice_msg(voice: VoiceClone) -> W.AddVoice:
    return W.AddVoice(
        call=0, name=voice.name, ref_audio=voice.ref_audio, ref_text=voice.ref_text, x_vector_only=voice.x_vector_only
    )
