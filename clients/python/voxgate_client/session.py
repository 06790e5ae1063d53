"""An async session with a voxgate gateway: the native call (`/v1/ws`) or an agent's control socket (`/v1/control`).

One reader task per session owns the socket's receive side: it turns every
message into a typed event for `events()`, resolves `Turn.done()` waiters, and
— on a control socket — re-attaches to the same call when the socket drops.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import deque
from typing import AsyncIterator, Iterable, AsyncIterable
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from voxgate_client import events as E

log = logging.getLogger("voxgate_client")

_END = object()


class VoxgateError(Exception):
    """The gateway refused something: `code` is its stable error code (docs/protocol.md). `status`: the HTTP
    status of a refused request (`place_call`), or the SIP status of a failed outbound call (`answered`)."""

    def __init__(self, code: str, message: str, status: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def endpoint(url: str, path: str) -> str:
    """`http(s)://host:port`, `ws(s)://host:port` or a full `/v1/...` URL → the WebSocket URL of `path`.

    A URL that already names the door is kept as it is: `…/v1/control`, and the path door with the call's
    id in it, `…/v1/control/{call_id}` (what a balancer hashing on the call id routes by)."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"the gateway URL must be http(s):// or ws(s)://, not {url!r}")
    base = parts.path.rstrip("/")
    head, _, last = base.rpartition("/")
    if not (base.endswith(path) or (head.endswith(path) and last)):
        base += path
    return urlunsplit((scheme, parts.netloc, base, parts.query, ""))


class Turn:
    """One agent reply streamed in pieces: `await turn.say(piece)` … `await turn.end()`; `await turn.done()`."""

    def __init__(self, session: "Session", turn_id: str):
        self.session = session
        self.turn_id = turn_id
        self.ended = False

    async def say(self, piece: str) -> None:
        if self.ended:
            raise RuntimeError(f"turn {self.turn_id!r} already ended")
        await self.session._send({"type": "text", "turn_id": self.turn_id, "text": piece, "final": False})

    async def end(self, text: str = "") -> None:
        """The last piece (may be empty): the gateway speaks what remains of the turn."""
        if not self.ended:
            self.ended = True
            await self.session._send({"type": "text", "turn_id": self.turn_id, "text": text, "final": True})

    async def done(self, timeout: float | None = None) -> E.TurnDone:
        """The turn's `turn.done`: how much was played, whether it was interrupted, what the caller heard."""
        return await self.session.wait_turn(self.turn_id, timeout)

    async def __aenter__(self) -> "Turn":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.end()


class Session:
    """Use `await Session.connect(url, …)` (a native call) or `await Session.attach(url, call_id, …)` (a telephony call)."""

    def __init__(
        self,
        ws: ClientConnection,
        *,
        path: str,
        url: str,
        headers: dict,
        audio: str,
        max_queued_events: int,
        attach_fields: dict | None = None,
        reconnect: bool = False,
        reconnect_timeout: float = 30.0,
    ):
        self._ws = ws
        self._path = path
        self._url = url
        self._headers = headers
        self._audio = audio
        self._attach_fields = attach_fields
        self._reconnect = reconnect
        self._reconnect_timeout = reconnect_timeout
        self._queue: deque = deque()
        self._queue_cap = max_queued_events
        self._queue_ready = asyncio.Event()
        self._turn_waiters: dict[str, asyncio.Future] = {}
        self._done_turns: dict[str, E.TurnDone] = {}
        self._connected = asyncio.Event()
        self._connected.set()
        self._closing = False
        self._reader: asyncio.Task | None = None
        self._ids = itertools.count(1)
        self.ended = asyncio.Event()  # set once the session is over (session.ended, or the socket is gone for good)
        self.dropped_events = 0  # events discarded because nobody read events() (see max_queued_events)
        self.session_id: str = ""
        self.call_id: str | None = None
        self.voice: str | None = None
        self.output: dict = {}
        self.word_timings = False  # the gateway sends `Words` events (Session.connect(word_timings=True))
        self._outcome: E.CallAnswered | E.CallFailed | None = None  # an outbound call's answer (Session.dial)
        self._outcome_known = asyncio.Event()  # set at the outcome, or when the session ends without one

    # ------------------------------------------------------------ opening
    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        instruct: str | None = None,
        encoding: str = "pcm16",
        sample_rate: int = 24000,
        audio: str = "bytes",
        pacing: str = "realtime",
        word_timings: bool = False,
        max_queued_events: int = 100_000,
        open_timeout: float = 10.0,
    ) -> "Session":
        """A native call on `/v1/ws`: this socket carries the text and receives the audio.

        `audio`: "bytes" (each binary message as an `Audio` event with bytes), "numpy" (int16/uint8
        arrays), or "drop" (frames are not queued; events only).
        `pacing`: "realtime" (20 ms frames as they play) or "none" (audio as the engine makes it, in
        pieces of any length, for a client that plays it itself; marks and `turn.done` then count the
        audio *sent*). `word_timings`: `Words` events say when each word is heard (`word_timings` is
        then True on the session once the gateway agreed; older gateways ignore the ask)."""
        if audio not in ("bytes", "numpy", "drop"):
            raise ValueError("audio must be 'bytes', 'numpy' or 'drop'")
        if pacing not in ("realtime", "none"):
            raise ValueError("pacing must be 'realtime' or 'none'")
        if audio == "numpy" and E._np is None:
            raise RuntimeError("audio='numpy' needs numpy installed")
        start = {"type": "session.start", "output": {"encoding": encoding, "sample_rate": sample_rate}}
        if pacing != "realtime":  # the default: a gateway older than pacing is not asked for it
            start["output"]["pacing"] = pacing
        if word_timings:
            start["word_timings"] = True
        for key, value in (("voice", voice), ("language", language), ("instruct", instruct)):
            if value is not None:
                start[key] = value
        headers = _auth(api_key)
        full = endpoint(url, "/v1/ws")
        ws = await _open(full, headers, open_timeout)
        self = cls(ws, path="/v1/ws", url=full, headers=headers, audio=audio, max_queued_events=max_queued_events)
        started = await self._handshake(start, E.SessionStarted, open_timeout)
        self.session_id, self.voice, self.output = started.session_id, started.voice, started.output
        self.word_timings = bool(started.extra.get("word_timings"))
        self._start_reader()
        return self

    @classmethod
    async def attach(
        cls,
        url: str,
        call_id: str,
        *,
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        instruct: str | None = None,
        reconnect: bool = True,
        reconnect_timeout: float = 30.0,
        max_queued_events: int = 100_000,
        open_timeout: float = 10.0,
    ) -> "Session":
        """The agent's side of a telephony call on `/v1/control` (`call.attach` by the call's id).

        With `reconnect`, a dropped socket is re-opened and re-attached to the same call for up to
        `reconnect_timeout` seconds (a `Reconnected` event says so); text sent meanwhile waits."""
        fields = {"type": "call.attach", "call_id": call_id}
        for key, value in (("voice", voice), ("language", language), ("instruct", instruct)):
            if value is not None:
                fields[key] = value
        headers = _auth(api_key)
        full = endpoint(url, "/v1/control")
        ws = await _open(full, headers, open_timeout)
        self = cls(
            ws,
            path="/v1/control",
            url=full,
            headers=headers,
            audio="drop",
            max_queued_events=max_queued_events,
            attach_fields=fields,
            reconnect=reconnect,
            reconnect_timeout=reconnect_timeout,
        )
        attached = await self._handshake(fields, E.CallAttached, open_timeout)
        self.session_id, self.call_id, self.voice = attached.session_id, attached.call_id, attached.voice
        self._start_reader()
        return self

    @classmethod
    async def dial(
        cls,
        url: str,
        to: str,
        *,
        trunk: str,
        from_: str | None = None,
        headers: dict[str, str] | None = None,
        ring_timeout_s: float | None = None,
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        instruct: str | None = None,
        reconnect: bool = True,
        reconnect_timeout: float = 30.0,
        max_queued_events: int = 100_000,
        open_timeout: float = 10.0,
    ) -> "Session":
        """Places an outbound call through the gateway's SIP trunk `trunk` (`place_call`) and attaches to it.

        `await session.answered()` waits for the far end; `events()` has its `CallProgress`, then
        `CallAnswered` or `CallFailed` (the gateway replays them to an agent that attaches late)."""
        from voxgate_client.calls import calls_url, place_call  # calls.py imports this module

        call_id = await place_call(
            url,
            to,
            trunk=trunk,
            from_=from_,
            headers=headers,
            ring_timeout_s=ring_timeout_s,
            api_key=api_key,
            timeout=open_timeout,
        )
        door = calls_url(url).removesuffix("/v1/calls") + f"/v1/control/{call_id}"  # a balancer hashes on it
        return await cls.attach(
            door,
            call_id,
            api_key=api_key,
            voice=voice,
            language=language,
            instruct=instruct,
            reconnect=reconnect,
            reconnect_timeout=reconnect_timeout,
            max_queued_events=max_queued_events,
            open_timeout=open_timeout,
        )

    async def answered(self, timeout: float | None = None) -> E.CallAnswered:
        """An outbound call's answer (`Session.dial`): its `CallAnswered` (`status`, `sip`: who answered).

        A call that failed raises `VoxgateError` with the failure's `code` (`busy`, `no_answer`, `rejected`,
        `not_found`, `unavailable`, `auth_failed`) and its SIP `status`; a session that ended first raises
        `VoxgateError("session_ended")`. Independent of `events()`."""
        await asyncio.wait_for(self._outcome_known.wait(), timeout)
        outcome = self._outcome
        if isinstance(outcome, E.CallAnswered):
            return outcome
        if isinstance(outcome, E.CallFailed):
            raise VoxgateError(outcome.code, outcome.reason or "the call failed", status=outcome.status)
        raise VoxgateError("session_ended", "the session ended before the call was answered")

    async def _handshake(self, message: dict, want: type, timeout: float):
        """Sends the opening message and reads until `want` (or the gateway's refusal)."""
        try:
            try:
                await self._ws.send(json.dumps(message))
            except ConnectionClosed:
                pass  # a refusal (at_capacity, shutting_down) closes at once: its error event is still unread
            return await asyncio.wait_for(self._read_until(want), timeout)
        except ConnectionClosed as exc:
            await self._ws.close()
            raise VoxgateError(
                "connection_closed", f"the gateway closed the socket before {want.type} ({exc})"
            ) from None
        except BaseException:
            await self._ws.close()
            raise

    async def _read_until(self, want: type):
        while True:
            raw = await self._ws.recv()
            if isinstance(raw, bytes):
                continue
            event = E.parse_event(json.loads(raw))
            if isinstance(event, want):
                return event
            if isinstance(event, E.Error):
                raise VoxgateError(event.code, event.message)
            self._put(event)

    # ------------------------------------------------------------ speaking
    def turn(self, turn_id: str | None = None) -> Turn:
        """A new turn whose text you stream piece by piece (an LLM's tokens)."""
        return Turn(self, turn_id or f"t{next(self._ids)}")

    async def say(self, text: str | Iterable[str] | AsyncIterable[str], *, turn_id: str | None = None) -> Turn:
        """Speaks a whole turn: one string, or an (async) iterable of pieces sent as they come. Returns the turn."""
        turn = self.turn(turn_id)
        if isinstance(text, str):
            await turn.end(text)
            return turn
        if hasattr(text, "__aiter__"):
            async for piece in text:
                await turn.say(piece)
        else:
            for piece in text:
                await turn.say(piece)
        await turn.end()
        return turn

    async def interrupt(self) -> None:
        """Barge-in: stop the current turn now and drop the queued ones."""
        await self._send({"type": "interrupt"})

    async def user_text(self, text: str) -> None:
        """What the caller said, for the gateway's built-in agent (`llm` configured)."""
        await self._send({"type": "user.text", "text": text})

    async def end(self, drain: bool = False, timeout: float = 30.0) -> None:
        """Ends the session (after the queued audio has played, with `drain`) and waits for it to be over."""
        if not self.ended.is_set():
            try:
                await self._send({"type": "session.end", "drain": drain})
                await asyncio.wait_for(self.ended.wait(), timeout)
            except (ConnectionClosed, asyncio.TimeoutError):
                pass
        await self.close()

    async def close(self) -> None:
        """Closes the socket (the gateway ends a native session; a telephony call goes on without its agent)."""
        self._closing = True
        await self._ws.close()
        if self._reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), 5.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        self._finish()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------ events
    async def events(self) -> AsyncIterator[E.Event]:
        """Every event in arrival order, until the session is over. One consumer per session."""
        while True:
            while not self._queue:
                self._queue_ready.clear()
                await self._queue_ready.wait()
            item = self._queue.popleft()
            if item is _END:
                self._queue.appendleft(_END)  # later calls end at once too
                return
            yield item

    async def wait_turn(self, turn_id: str, timeout: float | None = None) -> E.TurnDone:
        """Waits for the `turn.done` of `turn_id` (independent of `events()`)."""
        if turn_id in self._done_turns:
            return self._done_turns[turn_id]
        fut = self._turn_waiters.get(turn_id)
        if fut is None:
            fut = self._turn_waiters[turn_id] = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(asyncio.shield(fut), timeout)

    # ------------------------------------------------------------ internals
    async def _send(self, message: dict) -> None:
        if self.ended.is_set():
            raise VoxgateError("session_ended", "the session is over")
        for _ in range(2):
            if not self._connected.is_set():  # re-attaching: wait for it rather than lose the text
                await asyncio.wait_for(self._connected.wait(), self._reconnect_timeout)
                if self.ended.is_set():
                    raise VoxgateError("session_ended", "the session is over")
            try:
                await self._ws.send(json.dumps(message, ensure_ascii=False))
                return
            except ConnectionClosed:
                if not self._reconnect or self._closing:
                    raise VoxgateError("connection_closed", "the socket to the gateway is closed") from None
                self._connected.clear()  # the reader notices too and re-attaches
        raise VoxgateError("connection_closed", "the socket to the gateway is closed")

    def _start_reader(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(), name=f"voxgate-{self.session_id}")

    async def _read_loop(self) -> None:
        try:
            while True:
                try:
                    raw = await self._ws.recv()
                except ConnectionClosed:
                    if self.ended.is_set() or self._closing or not self._reconnect:
                        break
                    if not await self._reattach():
                        break
                    continue
                if isinstance(raw, bytes):
                    if self._audio != "drop":
                        data = (
                            E._np.frombuffer(
                                raw, dtype="<i2" if self.output.get("encoding") == "pcm16" else E._np.uint8
                            )
                            if self._audio == "numpy"
                            else raw
                        )
                        self._put(
                            E.Audio(
                                data=data,
                                encoding=self.output.get("encoding", "pcm16"),
                                sample_rate=self.output.get("sample_rate", 24000),
                            )
                        )
                    continue
                try:
                    event = E.parse_event(json.loads(raw))
                except ValueError:
                    log.warning("voxgate sent a message that is not JSON: %.80r", raw)
                    continue
                self._on_event(event)
        finally:
            self._finish()

    def _on_event(self, event: E.Event) -> None:
        if isinstance(event, E.TurnDone):
            self._done_turns[event.turn_id] = event
            fut = self._turn_waiters.pop(event.turn_id, None)
            if fut is not None and not fut.done():
                fut.set_result(event)
        elif isinstance(event, (E.CallAnswered, E.CallFailed)) and self._outcome is None:
            self._outcome = event
            self._outcome_known.set()
        self._put(event)
        if isinstance(event, E.SessionEnded):
            self.ended.set()
            self._outcome_known.set()

    async def _reattach(self) -> bool:
        """The control socket dropped: re-open it and re-attach to the same call; False if the call is gone."""
        self._connected.clear()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._reconnect_timeout
        delay, attempts = 0.05, 0
        reason = f"could not re-attach to call {self.call_id!r} within {self._reconnect_timeout:g} s"
        while loop.time() < deadline:
            attempts += 1
            try:
                ws = await _open(self._url, self._headers, max(0.1, deadline - loop.time()))
            except InvalidStatus as exc:
                if exc.response.status_code in (401, 403):
                    reason = "the gateway refused the API key on reconnect"
                    break
                ws = None
            except (OSError, WebSocketException, asyncio.TimeoutError):
                ws = None
            if ws is not None:
                old, self._ws = self._ws, ws
                try:
                    attached = await self._handshake(
                        self._attach_fields, E.CallAttached, max(0.1, deadline - loop.time())
                    )
                except VoxgateError as exc:
                    self._ws = old
                    if exc.code not in (
                        "call_busy",
                        "connection_closed",
                    ):  # call_busy: the gateway has not yet noticed the old socket is gone
                        reason = f"re-attach refused: {exc}"
                        break
                except (asyncio.TimeoutError, OSError):
                    self._ws = old
                else:
                    if attached.session_id != self.session_id:
                        # The call ended while we were away; this attach made a new, empty call: leave it.
                        await ws.close()
                        reason = f"call {self.call_id!r} ended while the control socket was down"
                        break
                    self._put(
                        E.Reconnected(call_id=attached.call_id, session_id=attached.session_id, attempts=attempts)
                    )
                    self._connected.set()
                    return True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self._put(E.Error(code="connection_lost", message=reason))
        self._put(E.SessionEnded(reason=reason))
        self.ended.set()
        return False

    def _put(self, item) -> None:
        if item is not _END and len(self._queue) >= self._queue_cap:
            self._queue.popleft()  # nobody is reading events(): keep the newest, count the loss
            self.dropped_events += 1
        self._queue.append(item)
        self._queue_ready.set()

    def _finish(self) -> None:
        if not self._queue or self._queue[-1] is not _END:
            if not self.ended.is_set():
                self.ended.set()
            self._queue.append(_END)
            self._queue_ready.set()
        self._connected.set()  # wake senders: they see `ended`
        self._outcome_known.set()
        for fut in self._turn_waiters.values():
            if not fut.done():
                fut.set_exception(VoxgateError("session_ended", "the session ended before the turn was done"))
        self._turn_waiters.clear()


def _auth(api_key: str | None) -> dict:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _open(url: str, headers: dict, timeout: float) -> ClientConnection:
    """Opens the socket; a refused upgrade (401, 503, …) becomes a VoxgateError with the gateway's code."""
    try:
        return await connect(url, additional_headers=headers, max_size=None, compression=None, open_timeout=timeout)
    except InvalidStatus as exc:
        status = exc.response.status_code
        try:
            body = json.loads(exc.response.body or b"{}")
        except ValueError:
            body = {}
        if status in (401, 403):
            raise VoxgateError(body.get("code", "unauthorized"), body.get("message", f"HTTP {status}")) from exc
        raise
