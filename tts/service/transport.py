"""Sockets of the engine service: endpoints, and CURVE security for tcp:// (docs/engine-protocol.md).

tcp:// endpoints are always encrypted and mutually authenticated with ZeroMQ's
CURVE (Curve25519 keys, as in CurveZMQ): both key pairs derive from the shared
secret in `VOXGATE_ENGINE_SECRET` through scrypt (a memory-hard KDF, so a
guessable secret costs a guesser ~16 MiB and tens of milliseconds per try), so a
peer without the secret can neither read the stream nor complete the handshake,
and the engine admits only the one client key derived from it. ipc:// sockets are guarded by the
file system (the socket's folder); the secret is not needed there.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import stat
import threading
import weakref

import zmq
import zmq.asyncio
from zmq.utils import z85

from tts.service.wire import SECRET_ENV

_TCP = re.compile(r"tcp://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+|\*):(\d{1,5})")
MAX_MESSAGE_BYTES = 64 * 2**20  # a cloned voice's reference recording is the largest message
# Messages an engine queues for one gateway before it counts that gateway as not reading and drops it (its
# streams freed). A reading gateway holds a few: one message per engine loop turn, taken as it comes; this
# is seconds of packets at any step rate, and bounds what one stuck peer can make the engine hold.
SEND_BACKLOG = 1000


class EndpointError(ValueError):
    pass


def send_now(sock, frames: list, copy: bool = True, on_error=None) -> BaseException | None:
    """Send without waiting on an asyncio socket: the error of a send that failed at once (EAGAIN while not
    connected, EHOSTUNREACH for a ROUTER peer that is gone), else None. A send that had to wait and then failed
    calls `on_error(exc)` later."""
    try:
        fut = sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
    except zmq.ZMQError as exc:
        return exc
    if fut.done():
        return None if fut.cancelled() else fut.exception()

    def done(f) -> None:
        if not f.cancelled() and f.exception() is not None and on_error is not None:
            on_error(f.exception())

    fut.add_done_callback(done)
    return None


def check_endpoint(endpoint: str) -> str:
    """`tcp://HOST:PORT` or `ipc://PATH`; ValueError otherwise."""
    if endpoint.startswith("ipc://"):
        if len(endpoint) <= len("ipc://"):
            raise EndpointError(f"{endpoint!r}: ipc:// needs a path")
        return endpoint
    m = _TCP.fullmatch(endpoint)
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise EndpointError(f"{endpoint!r}: expected tcp://HOST:PORT or ipc://PATH")
    return endpoint


def needs_secret(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


def secret_from_env(endpoints: list[str], env: dict | None = None) -> bytes | None:
    """The shared secret when any endpoint is tcp:// (EndpointError when it is missing or too short)."""
    env = os.environ if env is None else env
    value = env.get(SECRET_ENV, "")
    if not any(needs_secret(e) for e in endpoints):
        return value.encode() if value else None
    if len(value) < 16:
        raise EndpointError(
            f"tcp:// engine endpoints need the shared secret in {SECRET_ENV} "
            f"(at least 16 characters; {'it is unset' if not value else 'it is too short'})"
        )
    return value.encode()


KDF_SALT = b"voxgate-engine-curve-v2/"  # v1 was one SHA-256: engines and gateways of v1 and v2 do not pair
KDF_COST = {"n": 2**14, "r": 8, "p": 1, "maxmem": 64 * 2**20}


@functools.lru_cache(maxsize=8)  # derived once per process and role: scrypt is slow on purpose
def _keypair(secret: bytes, role: bytes) -> tuple[bytes, bytes]:
    """(public, secret) z85 CURVE keys derived from the shared secret for one role (server | client)."""
    raw = hashlib.scrypt(secret, salt=KDF_SALT + role, dklen=32, **KDF_COST)
    private = z85.encode(raw)
    return zmq.curve_public(private), private


def check_private_folder(folder: str) -> None:
    """An ipc:// socket is guarded by its folder alone (no secret): the folder must be ours and mode 0700, also
    when voxgate did not create it (anyone who may enter it could talk to the engine)."""
    st = os.stat(folder)
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.getuid() or mode & 0o077:
        raise EndpointError(
            f"ipc:// socket folder {folder} must belong to this user and have mode 0700 "
            f"(it is owned by uid {st.st_uid}, mode {mode:04o}): other users could reach the engine "
            "through it; use a private folder (chmod 700) or a tcp:// endpoint with the secret"
        )


def _unix_socket_serves(path: str) -> bool:
    """Whether a process accepts connections on this Unix socket path (a stale file left by a dead one: no)."""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


class _ClientKeyCheck:
    """ZAP callback: only the client key derived from the shared secret may connect."""

    def __init__(self, public: bytes):
        self.public = public

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public


class Transport:
    """One process's ZeroMQ context and (for tcp:// servers) its authenticator thread."""

    def __init__(self) -> None:
        self._sync = zmq.Context()
        self.context = zmq.asyncio.Context.shadow(self._sync.underlying)
        self._auth = None
        self._lock = threading.Lock()
        self._made: weakref.WeakSet = weakref.WeakSet()  # its sockets: the sync context's destroy does not see them

    def _authenticator(self, client_public: bytes) -> None:
        with self._lock:
            if self._auth is None:
                from zmq.auth.thread import ThreadAuthenticator

                self._auth = ThreadAuthenticator(self._sync, log=None)
                self._auth.start()
                self._auth.configure_curve_callback("*", _ClientKeyCheck(client_public))

    def server_socket(
        self, endpoint: str, secret: bytes | None, send_backlog: int = SEND_BACKLOG
    ) -> zmq.asyncio.Socket:
        """A bound ROUTER. tcp:// requires the secret."""
        check_endpoint(endpoint)
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        # A send to a gateway that is gone, or that has `send_backlog` messages waiting (it stopped reading),
        # raises instead of dropping the message silently: that gateway is dropped and its streams are freed.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.SNDHWM, send_backlog)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        try:
            if needs_secret(endpoint):
                if not secret:
                    raise EndpointError(f"{endpoint}: a tcp:// engine needs the shared secret in {SECRET_ENV}")
                server_public, server_private = _keypair(secret, b"server")
                client_public, _ = _keypair(secret, b"client")
                self._authenticator(client_public)
                sock.curve_server = True
                sock.curve_publickey, sock.curve_secretkey = server_public, server_private
            elif endpoint.startswith("ipc://"):
                path = endpoint[len("ipc://") :]
                folder = os.path.dirname(path) or "."
                os.makedirs(folder, mode=0o700, exist_ok=True)
                check_private_folder(folder)
                if _unix_socket_serves(path):  # ZeroMQ's bind would unlink it and orphan that process
                    raise EndpointError(
                        f"{endpoint}: another process serves on this socket (stop it first, or listen on another path)"
                    )
            sock.bind(endpoint)
            self._made.add(sock)
        except (zmq.ZMQError, OSError) as exc:
            sock.close(linger=0)  # an open socket would keep the context's termination waiting for ever
            raise EndpointError(f"{endpoint}: cannot listen there: {exc}") from exc
        except BaseException:
            sock.close(linger=0)
            raise
        return sock

    def client_socket(self, endpoint: str, secret: bytes | None, on_socket=None) -> zmq.asyncio.Socket:
        """A DEALER connecting to one engine (it reconnects by itself; sends fail while it is down).
        `on_socket(sock)` runs before the connect: a monitor attached there sees the first handshake's events,
        which one attached after `connect` can miss (the I/O thread may finish the handshake first)."""
        check_endpoint(endpoint)
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for an engine that is not connected
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        try:
            if needs_secret(endpoint):
                if not secret:
                    raise EndpointError(f"{endpoint}: tcp:// engine endpoints need the shared secret in {SECRET_ENV}")
                server_public, _ = _keypair(secret, b"server")
                client_public, client_private = _keypair(secret, b"client")
                sock.curve_serverkey = server_public
                sock.curve_publickey, sock.curve_secretkey = client_public, client_private
            if on_socket is not None:
                on_socket(sock)
            sock.connect(endpoint)
        except BaseException:
            sock.close(linger=0)  # an open socket would keep the context's termination waiting for ever
            raise
        self._made.add(sock)
        return sock

    def close(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        for sock in list(self._made):  # one its user left open would hold the termination for ever
            if not sock.closed:
                sock.close(linger=0)
        self._sync.destroy(linger=0)  # the asyncio context is a shadow of this one: one termination
