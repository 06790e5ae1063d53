"""Strict YAML config (docs/configuration.md is generated from these dataclasses).

Every section is a dataclass; unknown keys, wrong types and impossible values
are refused at start with a `ConfigError` naming the file and the key path.
"""

from __future__ import annotations

import dataclasses
import os
import re
import ssl
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and key."""


# ---------------------------------------------------------------- sections


def _is_origin(text: str) -> bool:
    scheme, sep, rest = text.partition("://")
    return bool(sep and scheme and rest) and "/" not in rest.rstrip("/") and " " not in text


def _is_engine_endpoint(text: str) -> bool:
    import re

    if text.startswith("ipc://"):
        return len(text) > len("ipc://")
    m = re.fullmatch(r"tcp://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})", text)
    return bool(m) and int(m.group(2)) <= 65535


def _are_networks(entries: list[str]) -> bool:
    from gateway.security.peers import parse_networks

    try:
        parse_networks(entries)
    except ValueError:
        return False
    return True


@dataclass
class LimitsConfig:
    max_message_bytes: int = 65_536
    max_text_per_turn: int = 20_000  # characters of agent text in one turn
    max_queued_turns: int = 16
    idle_timeout_s: float = 300.0  # no client message for this long ends the session
    ping_interval_s: float = 20.0
    max_call_s: float = 3600.0
    drain_timeout_s: float = 20.0  # SIGTERM: how long turns may finish
    # Per client address, on every door (HTTP, WebSocket, AudioSocket); 0 = off. Off by default: behind a proxy
    # without server.trusted_proxies every caller is the proxy's one address, and loopback benches open hundreds.
    max_connections_per_ip: int = 0  # connections open at once
    connections_per_ip_per_s: float = 0.0  # new connections a second (token bucket holding one second's worth)

    def validate(self, check) -> None:
        check(self.max_message_bytes >= 256, "max_message_bytes", "must be >= 256")
        check(self.max_connections_per_ip >= 0, "max_connections_per_ip", "must be >= 0 (0 = unlimited)")
        check(self.connections_per_ip_per_s >= 0, "connections_per_ip_per_s", "must be >= 0 (0 = unlimited)")
        check(self.max_text_per_turn >= 1, "max_text_per_turn", "must be >= 1")
        check(self.max_queued_turns >= 1, "max_queued_turns", "must be >= 1")
        for name in ("idle_timeout_s", "ping_interval_s", "max_call_s"):
            check(getattr(self, name) > 0, name, "must be > 0")
        check(self.drain_timeout_s >= 0, "drain_timeout_s", "must be >= 0")


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_sessions: int = 500
    api_keys: list[str] = field(default_factory=list)
    log_dir: str | None = None  # per-session playout event logs (JSON lines) and WAV timelines
    record_wav: bool = False  # with log_dir: WAV timeline of exactly what was played
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    voices_dir: str | None = None  # cloned voices uploaded with POST /v1/voices persist here (survive restarts)
    voice_upload_max_bytes: int = 16 * 2**20  # POST /v1/voices body limit (30 s of 48 kHz stereo float is 11.5 MB)
    # Browser pages allowed to call the gateway (`https://app.example.com`): a request carrying another `Origin`
    # gets 403; requests without one (servers, SDKs, telephony) pass; the gateway's own page always passes.
    # Empty = any origin.
    allowed_origins: list[str] = field(default_factory=list)
    token_ttl_s: float = 300.0  # POST /v1/tokens: how long a browser token stays good (it opens one session)
    # Proxies (IPs/CIDRs) whose X-Forwarded-For names the real client for the per-IP limits
    trusted_proxies: list[str] = field(default_factory=list)

    def validate(self, check) -> None:
        check(
            all(_is_origin(o) for o in self.allowed_origins),
            "allowed_origins",
            "entries must be origins like https://app.example.com (scheme://host[:port], no path)",
        )
        check(0 < self.token_ttl_s <= 86400, "token_ttl_s", "must be > 0 and <= 86400")
        check(_are_networks(self.trusted_proxies), "trusted_proxies", "entries must be IP addresses or CIDR networks")
        check(0 <= self.port <= 65535, "port", "must be 0..65535")
        check(self.voice_upload_max_bytes >= 1024, "voice_upload_max_bytes", "must be >= 1024")
        check(self.max_sessions >= 1, "max_sessions", "must be >= 1")
        check(all(isinstance(k, str) and k for k in self.api_keys), "api_keys", "must be non-empty strings")


VOCODERS = ("auto", "torch", "onnxruntime", "tensorrt")
ENGINE_KINDS = ("auto", "qwen3", "simulated", "espeak", "remote", "openai-speech")


def _is_http_url(text: str) -> bool:
    parts = urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment


@dataclass
class EngineConfig:
    kind: str = "auto"  # auto | qwen3 | simulated | espeak | remote | openai-speech (auto: qwen3 with a model_dir, else espeak, else simulated)
    model_dir: str | None = None
    dtype: str = "bfloat16"
    device: str = "auto"  # auto (cuda when available, else cpu) | cpu | cuda | cuda:N
    max_batch: int = 64
    max_queued: int = 1024
    vocoder: str = "auto"  # auto | torch | onnxruntime | tensorrt (auto: the fastest available, logged)
    vocoder_cache: str | None = None  # ONNX exports + TensorRT engines (default ~/.cache/voxgate/vocoder)
    # qwen3, sentence mode: a local Qwen3-ForcedAligner checkpoint; each chunk's words timed on its audio (source
    # aligner) in the engine's process. Never downloaded. Unset: words placed by the estimate
    aligner_dir: str | None = None
    stall_timeout_s: float = 10.0  # a text chunk with no audio from the engine for this long fails with engine_error
    # cloned voices' x-vectors and reference codes (default: server.voices_dir/cache, else ~/.cache/voxgate/voices)
    voice_cache: str | None = None
    # kind remote: engine processes (`voxgate engine`) to place requests on; tcp:// needs VOXGATE_ENGINE_SECRET
    endpoints: list[str] = field(
        default_factory=list
    )  # tcp://HOST:PORT | ipc://PATH; kind openai-speech: http(s)://HOST:PORT/v1
    connect_timeout_s: float = 5.0  # remote: how long the start waits for a first engine (then it serves without)
    # the engine in its own process on this box: `voxgate engine` as a supervised child on an ipc:// socket
    isolate: bool = False
    isolate_start_timeout_s: float = 600.0  # isolate: how long the start waits for the child to load
    model: str | None = None  # kind openai-speech (endpoints: the speech servers' http://HOST:PORT/v1): sent as "model"
    api_key_env: str | None = None  # openai-speech: environment variable with the servers' bearer token
    sample_rate: int = 24000  # openai-speech: what the servers stream (a server that states another rate is refused)
    task_type: str | None = (
        None  # openai-speech on vLLM-Omni Qwen3-TTS: CustomVoice | VoiceDesign | Base (default: the server's)
    )
    tcp_connect_timeout_s: float = 1.0  # openai-speech: a request's TCP connect; beyond it, another server
    # openai-speech: request sent → first audio byte; beyond it the chunk tries another server and this one is
    # out (suspect) until a short speech request gets its first audio byte in time
    first_byte_timeout_s: float = 2.0
    stream_stall_timeout_s: float = 5.0  # openai-speech: no byte mid-chunk for this long ends it with engine_error
    # openai-speech: http (streamed POST /v1/audio/speech) | websocket (vLLM-Omni's /v1/audio/speech/stream: word timings)
    speech_transport: str = "http"

    def validate(self, check) -> None:
        check(self.kind in ENGINE_KINDS, "kind", "must be " + ", ".join(ENGINE_KINDS[:-1]) + " or " + ENGINE_KINDS[-1])
        check(
            not self.aligner_dir or self.kind in ("auto", "qwen3"),
            "aligner_dir",
            "is for the Qwen3 engine (kind: qwen3 or auto)",
        )
        check(
            self.kind in ("remote", "openai-speech") or not self.endpoints,
            "endpoints",
            "are only for kind: remote or openai-speech",
        )
        if self.kind == "openai-speech":
            check(bool(self.endpoints), "endpoints", "must list at least one speech server for kind: openai-speech")
            check(
                all(isinstance(e, str) and _is_http_url(e) for e in self.endpoints),
                "endpoints",
                "entries must be http(s)://HOST:PORT/v1 base URLs for kind: openai-speech",
            )
            check(
                self.sample_rate in (8000, 16000, 22050, 24000, 44100, 48000),
                "sample_rate",
                "must be 8000, 16000, 22050, 24000, 44100 or 48000",
            )
            check(
                self.task_type in (None, "CustomVoice", "VoiceDesign", "Base"),
                "task_type",
                "must be CustomVoice, VoiceDesign or Base",
            )
            check(
                not self.isolate, "isolate", "runs a local engine as a child; kind: openai-speech uses speech servers"
            )
            check(self.speech_transport in ("http", "websocket"), "speech_transport", "must be http or websocket")
        else:
            check(
                all(isinstance(e, str) and _is_engine_endpoint(e) for e in self.endpoints),
                "endpoints",
                "entries must be tcp://HOST:PORT or ipc://PATH",
            )
        check(len(set(self.endpoints)) == len(self.endpoints), "endpoints", "lists an engine twice")
        check(
            self.kind == "openai-speech" or self.speech_transport == "http",
            "speech_transport",
            "is only for kind: openai-speech",
        )
        check(
            not (self.isolate and self.kind == "remote"),
            "isolate",
            "runs a local engine (qwen3, simulated, espeak) as a child; kind: remote connects to engines instead",
        )
        check(self.connect_timeout_s >= 0, "connect_timeout_s", "must be >= 0")
        check(self.isolate_start_timeout_s > 0, "isolate_start_timeout_s", "must be > 0")
        check(self.stall_timeout_s > 0, "stall_timeout_s", "must be > 0")
        for name in ("tcp_connect_timeout_s", "first_byte_timeout_s", "stream_stall_timeout_s"):
            check(getattr(self, name) > 0, name, "must be > 0")
        check(self.dtype in ("float32", "bfloat16", "float16"), "dtype", "must be float32, bfloat16 or float16")
        check(self.max_batch >= 1, "max_batch", "must be >= 1")
        check(self.max_queued >= 1, "max_queued", "must be >= 1")
        check(self.vocoder in VOCODERS, "vocoder", "must be " + ", ".join(VOCODERS[:-1]) + " or " + VOCODERS[-1])


@dataclass
class SimulatedConfig:
    first_packet_ms: float = 60.0
    capacity_x: float = 50.0  # audio-seconds per wall second, shared by all active requests
    ms_per_char: float = 70.0
    stream_rtf: float = 0.1  # fastest a single request may go (RTF while under capacity)
    packet_ms: float = 320.0  # audio per streamed packet after the first
    scheduling: str = "edf"  # edf (earliest deadline first) | fcfs
    max_queued: int = 4096

    def validate(self, check) -> None:
        check(self.first_packet_ms >= 0, "first_packet_ms", "must be >= 0")
        check(self.capacity_x > 0, "capacity_x", "must be > 0")
        check(self.ms_per_char > 0, "ms_per_char", "must be > 0")
        check(self.stream_rtf > 0, "stream_rtf", "must be > 0")
        check(self.packet_ms >= 20, "packet_ms", "must be >= 20")
        check(self.scheduling in ("edf", "fcfs"), "scheduling", "must be edf or fcfs")
        check(self.max_queued >= 1, "max_queued", "must be >= 1")


@dataclass
class PlayoutConfig:
    prebuffer_ms: float = 60.0
    frame_ms: int = 20
    max_ahead_ms: float = 4000.0  # a paced call reads no more engine audio while this much waits to play

    def validate(self, check) -> None:
        check(0 <= self.prebuffer_ms <= 5000, "prebuffer_ms", "must be 0..5000")
        check(500 <= self.max_ahead_ms <= 60_000, "max_ahead_ms", "must be 500..60000")
        check(self.frame_ms == 20, "frame_ms", "only 20 ms frames are supported")


@dataclass
class ChunkerConfig:
    first_chunk_words: int = 6  # a turn's first chunk goes out at its first clause break (, ; : —) or after this many words; 0: sentences only
    max_chunk_chars: int = 250
    min_chunk_chars: int = 1
    min_first_chars: int = 10  # a fast first chunk shorter than this would play out before the next is ready
    mode: str = "sentence"  # sentence: a generation per clause/sentence; turn: one per agent turn (session.start.mode)

    def validate(self, check) -> None:
        check(self.mode in ("sentence", "turn"), "mode", "must be sentence or turn")
        check(self.first_chunk_words >= 0, "first_chunk_words", "must be >= 0")
        check(self.max_chunk_chars >= 20, "max_chunk_chars", "must be >= 20")
        check(self.min_chunk_chars >= 1, "min_chunk_chars", "must be >= 1")
        check(self.min_first_chars >= 0, "min_first_chars", "must be >= 0")


@dataclass
class VoiceConfig:
    speaker: str | None = None
    language: str = "auto"
    instruct: str | None = None
    normalize: bool = True
    stress: bool = False  # Russian stress marks (silero-stress) for stress-trained finetunes
    stress_format: str = "plus"  # plus ('+' before the vowel) | acute (combining accent after it)
    stress_homographs: bool = True  # silero's context model (замок, готов); off = far cheaper, homographs unmarked
    lexicon: dict[str, dict[str, str]] = field(default_factory=dict)  # language -> word -> spoken form
    aliases: list[str] = field(default_factory=list)  # other names this voice answers to (e.g. OpenAI's: alloy, nova)
    # A cloned voice (Qwen3-TTS Base checkpoints): a reference recording (WAV, 1-30 s, any rate; relative paths
    # from the config file's folder), its transcript (in-context cloning), or x_vector_only (no transcript).
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only: bool = False

    @property
    def kind(self) -> str:
        """clone_icl | clone_xvector | speaker | design | default (the engine's own voice)."""
        if self.ref_audio:
            return "clone_xvector" if self.x_vector_only else "clone_icl"
        if self.speaker:
            return "speaker"
        return "design" if self.instruct else "default"

    def validate(self, check) -> None:
        if self.ref_audio is not None:
            from audio.reference import ReferenceAudioError, load_reference

            check(not self.speaker, "speaker", "a cloned voice (ref_audio) takes no speaker")
            check(
                self.x_vector_only or bool(self.ref_text and self.ref_text.strip()),
                "ref_text",
                "is required for in-context cloning (the reference's transcript); or set x_vector_only: true",
            )
            check(os.path.isfile(self.ref_audio), "ref_audio", "file not found")
            try:
                load_reference(self.ref_audio)
            except ReferenceAudioError as exc:
                check(False, "ref_audio", exc.message)
        check(isinstance(self.x_vector_only, bool), "x_vector_only", "must be true or false")
        check(self.stress_format in ("plus", "acute"), "stress_format", "must be plus or acute")
        check(all(isinstance(a, str) and a.strip() for a in self.aliases), "aliases", "must be non-empty strings")
        check(isinstance(self.stress_homographs, bool), "stress_homographs", "must be true or false")


@dataclass
class TelephonyConfig:
    audiosocket_port: int | None = None  # enables the AudioSocket TCP server
    audiosocket_host: str | None = None  # defaults to server.host
    unknown_call_timeout_s: float = 10.0
    twilio_auth_token_env: str | None = None  # env var holding the Twilio auth token (verifies signatures)
    public_url: str | None = None  # the URL Twilio dials, for signature checks behind proxies
    record_inbound_dir: str | None = None
    # With server.api_keys set, /v1/twilio takes only streams signed with the auth token; true lets unsigned ones in
    twilio_allow_unsigned: bool = False
    audiosocket_allow: list[str] = field(default_factory=list)  # peers (IPs/CIDRs) that may connect; empty = any

    def validate(self, check) -> None:
        check(
            _are_networks(self.audiosocket_allow), "audiosocket_allow", "entries must be IP addresses or CIDR networks"
        )
        if self.audiosocket_port is not None:
            check(0 <= self.audiosocket_port <= 65535, "audiosocket_port", "must be 0..65535")
        check(self.unknown_call_timeout_s > 0, "unknown_call_timeout_s", "must be > 0")


@dataclass
class LlmConfig:
    kind: str = "none"  # none | openai | simulated
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    system_prompt: str = "You are a helpful voice agent on a phone call. Answer briefly."
    timeout_s: float = 30.0
    # simulator (kind: simulated)
    ttft_ms: float = 300.0
    tokens_per_s: float = 40.0

    def validate(self, check) -> None:
        check(self.kind in ("none", "openai", "simulated"), "kind", "must be none, openai or simulated")
        if self.kind == "openai":
            check(bool(self.base_url), "base_url", "is required for kind: openai")
            check(bool(self.model), "model", "is required for kind: openai")
        check(self.timeout_s > 0, "timeout_s", "must be > 0")
        check(self.tokens_per_s > 0, "tokens_per_s", "must be > 0")


@dataclass
class WebrtcConfig:
    ice_servers: list[str] = field(default_factory=list)  # e.g. stun:stun.example.org:3478
    # TURN with credentials minted per session (coturn use-auth-secret): the URLs, and the env var holding the secret
    turn_urls: list[str] = field(default_factory=list)  # e.g. turn:turn.example.org:3478?transport=udp, turns:…:5349
    turn_secret_env: str | None = None
    turn_ttl_s: float | None = None  # how long minted credentials last; default limits.max_call_s + 300 s

    def validate(self, check) -> None:
        check(
            all(u.split(":", 1)[0] in ("turn", "turns") and "@" not in u for u in self.turn_urls),
            "turn_urls",
            "entries must be turn: or turns: URLs without credentials (they are minted per session)",
        )
        check(not self.turn_urls or bool(self.turn_secret_env), "turn_secret_env", "is required with turn_urls")
        check(self.turn_ttl_s is None or self.turn_ttl_s >= 60, "turn_ttl_s", "must be >= 60")


BARGE_IN_MODES = ("off", "detect", "vad")


@dataclass
class BargeInConfig:
    """The caller's voice: detection (`user.speech`) and barge-in by voice; `session.start.barge_in` overrides per call."""

    mode: str = (
        "off"  # off: no detection | detect: user.speech events only | vad: events, and speech interrupts the agent
    )
    min_speech_ms: float = 250.0  # speech this long during playout interrupts
    detector: str = "silero"  # silero (accurate; needs the `vad` extra) | webrtc (cheap; fires on noise and music)
    threshold: float = (
        0.7  # speech probability that counts as speech (0.5 and 0.6 fired on music-like tones through Opus)
    )
    onset_ms: float = 128.0  # consecutive speech before `user.speech started` (dated at its first window)
    silence_ms: float = 300.0  # quiet before `user.speech stopped`
    echo_holdoff_ms: float = 300.0  # after each audio start, speech is not counted toward a barge-in for this long
    pause_on_onset: bool = (
        False  # where voxgate owns the buffer: pause at speech onset, resume if it was shorter than min_speech_ms
    )

    def validate(self, check) -> None:
        check(self.mode in BARGE_IN_MODES, "mode", "must be off, detect or vad")
        check(self.detector in ("silero", "webrtc"), "detector", "must be silero or webrtc")
        check(0 <= self.min_speech_ms <= 10_000, "min_speech_ms", "must be 0..10000")
        check(0.0 < self.threshold < 1.0, "threshold", "must be between 0 and 1")
        check(0 <= self.onset_ms <= 2000, "onset_ms", "must be 0..2000")
        check(30 <= self.silence_ms <= 10_000, "silence_ms", "must be 30..10000")
        check(0 <= self.echo_holdoff_ms <= 10_000, "echo_holdoff_ms", "must be 0..10000")


@dataclass
class SttConfig:
    """Speech to text for each detected utterance: an OpenAI-compatible `/v1/audio/transcriptions`."""

    kind: str = "off"  # off | openai
    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1 (whisper.cpp server, faster-whisper servers, vLLM)
    model: str = "whisper-1"
    api_key_env: str | None = None  # env var holding the key (sent as a Bearer token)
    language: str | None = None  # ISO 639-1 hint; empty lets the server detect it
    timeout_s: float = 15.0
    min_utterance_ms: float = 200.0  # shorter speech is not sent
    max_utterance_s: float = 30.0  # longer speech is cut to its last max_utterance_s
    preroll_ms: float = 200.0  # audio kept before the detected onset (the first phoneme starts before VAD is sure)

    def validate(self, check) -> None:
        check(self.kind in ("off", "openai"), "kind", "must be off or openai")
        if self.kind == "openai":
            check(bool(self.base_url), "base_url", "is required for kind: openai")
            check(bool(self.model), "model", "is required for kind: openai")
        check(self.timeout_s > 0, "timeout_s", "must be > 0")
        check(0 <= self.min_utterance_ms <= 10_000, "min_utterance_ms", "must be 0..10000")
        check(1 <= self.max_utterance_s <= 300, "max_utterance_s", "must be 1..300")
        check(0 <= self.preroll_ms <= 2000, "preroll_ms", "must be 0..2000")


CLUSTER_KEY = re.compile(r"[A-Za-z0-9_.:-]{0,64}")


@dataclass
class ClusterConfig:
    """Many gateway nodes, one call plane (docs/cluster.md). Without `redis_url`: one process, no Redis, as always."""

    redis_url: str | None = None  # redis://host:6379/0 or rediss:// (TLS); Valkey speaks the same protocol
    password_env: str | None = None  # env var holding the Redis password (never in the file or the URL)
    node_id: str | None = None  # this node's name in the plane; default: host name + ":" + the HTTP port
    advertise_url: str | None = (
        None  # how other nodes reach this one (http://10.0.0.5:8080); default from server.host/port
    )
    key_prefix: str = "voxgate:"  # every key this plane writes starts with it (several planes may share one Redis)
    claim_ttl_s: float = 10.0  # a call's owner claim and a node's registration live this long unless refreshed
    secret_env: str | None = None  # env var with the nodes' shared hop secret (required with redis_url; never in Redis)
    peer_ca_file: str | None = (
        None  # PEM CA bundle that signs other nodes' https:// advertise_url (default: the system's)
    )

    def validate(self, check) -> None:
        if self.redis_url is None:
            for name in ("password_env", "node_id", "advertise_url", "secret_env", "peer_ca_file"):
                check(
                    getattr(self, name) is None, name, "needs cluster.redis_url (without it the gateway is one process)"
                )
            return
        parts = urlsplit(self.redis_url)
        check(
            parts.scheme in ("redis", "rediss") and bool(parts.hostname),
            "redis_url",
            "must be redis://host[:port][/db] or rediss://host[:port][/db]",
        )
        if parts.password is not None:  # the refusal must not print it
            self.redis_url = self.redis_url.replace(f":{parts.password}@", ":***@", 1)
            check(False, "redis_url", "must not hold a password; name its environment variable in cluster.password_env")
        try:
            parts.port
        except ValueError:
            check(False, "redis_url", "has a port that is not a number 0..65535")
        check(
            parts.path in ("", "/") or parts.path[1:].isdigit(),
            "redis_url",
            "may name only a database number as its path (/0)",
        )
        if self.password_env is not None:
            check(
                bool(os.environ.get(self.password_env)),
                "password_env",
                f"names {self.password_env!r}, but that environment variable is empty or unset",
            )
        if self.node_id is not None:
            check(
                bool(self.node_id) and CLUSTER_KEY.fullmatch(self.node_id) is not None,
                "node_id",
                "must be 1..64 characters of letters, digits and _ . : -",
            )
        if self.advertise_url is not None:
            check(
                _is_origin(self.advertise_url) and self.advertise_url.split("://", 1)[0] in ("http", "https"),
                "advertise_url",
                "must be http://host:port or https://host:port (no path)",
            )
        check(
            CLUSTER_KEY.fullmatch(self.key_prefix) is not None,
            "key_prefix",
            "must be up to 64 letters, digits and _ . : -",
        )
        check(1.0 <= self.claim_ttl_s <= 600.0, "claim_ttl_s", "must be 1..600")
        if self.peer_ca_file is not None:
            check(os.path.isfile(self.peer_ca_file), "peer_ca_file", "must name a readable PEM file of CA certificates")
        # required by every gateway node (ClusterPlane.start says so); an engine registering in the plane needs none
        if self.secret_env is not None:
            check(
                len(os.environ.get(self.secret_env, "")) >= 16,
                "secret_env",
                f"names {self.secret_env!r}, which must hold at least 16 characters",
            )

    @property
    def enabled(self) -> bool:
        return self.redis_url is not None


@dataclass
class SipRegistration:
    """A registration to a provider (REGISTER), for trunks that send calls to a registered contact."""

    server: str = ""  # the registrar: sip:provider.example.com[:port] (or host[:port]); 5060 by default
    user: str = ""  # the account: the address of record is sip:USER@HOST
    password_env: str | None = None  # env var holding the password for digest auth (never in the file)
    expires: int = 600  # seconds the registration is asked for; refreshed before it runs out

    def validate(self, check) -> None:
        check(sip_registrar(self.server) is not None, "server", "must be sip:HOST[:PORT] or HOST[:PORT]")
        check(
            bool(self.user) and self.user.isprintable() and not any(c in self.user for c in " @:<>;"),
            "user",
            "must be a SIP user name (no spaces or @ : < > ;)",
        )
        check(60 <= self.expires <= 86400, "expires", "must be 60..86400")
        if self.password_env is not None:
            check(
                bool(os.environ.get(self.password_env)),
                "password_env",
                f"names {self.password_env!r}, but that environment variable is empty or unset",
            )


SIP_DIGEST_ALGORITHMS = ("SHA-256", "MD5")  # gateway/sip/digest.py's HASHES, strongest first
SIP_AUTH_COMBINE = ("either", "both")


@dataclass
class SipAuthUser:
    """One account that may authenticate inbound INVITEs (`sip.auth.users`)."""

    user: str = ""  # the user name the trunk or PBX authenticates with
    password_env: str = ""  # env var holding the password (never in the file)

    def validate(self, check) -> None:
        check(
            bool(self.user) and self.user.isprintable() and not any(c in self.user for c in ' "\\'),
            "user",
            "must be a user name without spaces, quotes or backslashes",
        )
        check(
            bool(self.password_env) and bool(os.environ.get(self.password_env)),
            "password_env",
            f"names {self.password_env!r}, but that environment variable is empty or unset",
        )


@dataclass
class SipAuthConfig:
    """Digest authentication of inbound INVITEs (gateway/sip/inbound_auth.py, docs/sip.md#authentication)."""

    realm: str = ""  # the realm challenges name (e.g. voxgate.example.com); the trunk's credentials are for it
    users: list[SipAuthUser] = field(default_factory=list)  # each {user, password_env}
    # digest algorithms challenged with, strongest first; a client answers one of them (some, like SIPp, only the
    # first, so list only MD5 for such a client)
    algorithms: list[str] = field(default_factory=lambda: list(SIP_DIGEST_ALGORITHMS))
    # how sip.allow and credentials combine: `either` (a source in sip.allow is not challenged, any other must
    # authenticate) or `both` (only sources in sip.allow, and they must authenticate too)
    combine: str = "either"
    nonce_ttl_s: float = 300.0  # a challenge's nonce is good this long; an older one gets a new challenge (stale)
    # env var holding a secret (16+ characters) shared by every node, so a nonce one node issued verifies on another;
    # unset: a random secret per process
    nonce_secret_env: str | None = None
    max_failures: int = 5  # failed attempts from one source before it is refused unchecked for block_s
    block_s: float = 60.0  # how long a source that reached max_failures is refused (403 auth_failed, no challenge)

    def validate(self, check) -> None:
        check(
            bool(self.realm) and self.realm.isprintable() and not any(c in self.realm for c in '"\\'),
            "realm",
            "must be set, without quotes or backslashes (e.g. voxgate.example.com)",
        )
        check(bool(self.users), "users", "must list at least one {user, password_env}")
        names = [u.user for u in self.users]
        check(len(set(names)) == len(names), "users", "lists a user name twice")
        check(
            bool(self.algorithms)
            and all(a in SIP_DIGEST_ALGORITHMS for a in self.algorithms)
            and len(set(self.algorithms)) == len(self.algorithms),
            "algorithms",
            f"must list some of {', '.join(SIP_DIGEST_ALGORITHMS)}, each once",
        )
        check(self.combine in SIP_AUTH_COMBINE, "combine", f"must be one of {', '.join(SIP_AUTH_COMBINE)}")
        check(10 <= self.nonce_ttl_s <= 3600, "nonce_ttl_s", "must be 10..3600")
        if self.nonce_secret_env is not None:
            check(
                len(os.environ.get(self.nonce_secret_env, "")) >= 16,
                "nonce_secret_env",
                f"names {self.nonce_secret_env!r}, which must hold at least 16 characters",
            )
        check(self.max_failures >= 1, "max_failures", "must be >= 1")
        check(self.block_s > 0, "block_s", "must be > 0")
        for i, user in enumerate(self.users):  # list items are not walked by _validate_tree
            user.validate(lambda ok, key, message, i=i: check(ok, "users", f"[{i}].{key} {message}"))


SIP_TRANSPORTS = ("udp", "tcp", "tls")


@dataclass
class SipTlsConfig:
    """SIP over TLS (TLS 1.2 or newer, Python's ssl): its own port; docs/sip.md#tls."""

    port: int = 5061  # the TLS listener's port (0: a free one)
    cert_file: str = ""  # PEM certificate chain the listener presents (the trunk checks it against the name it dials)
    key_file: str = ""  # PEM private key of cert_file
    # PEM CA certificates that client certificates are checked against, and tls trunks' certificates (unless the
    # trunk names its own ca_file; unset: the system's CAs verify trunks)
    ca_file: str | None = None
    require_client_cert: bool = False  # mutual TLS: refuse a connection without a client certificate ca_file verifies

    def validate(self, check) -> None:
        check(0 <= self.port <= 65535, "port", "must be 0..65535")
        check(os.path.isfile(self.cert_file), "cert_file", "must name a readable PEM certificate file")
        check(os.path.isfile(self.key_file), "key_file", "must name a readable PEM private key file")
        if self.ca_file is not None:
            check(os.path.isfile(self.ca_file), "ca_file", "must name a readable PEM file of CA certificates")
        check(not self.require_client_cert or self.ca_file is not None, "require_client_cert", "needs ca_file")
        from gateway.sip.tls import server_context

        try:
            server_context(self)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            check(False, "cert_file", f"and key_file do not load as a certificate and its key ({exc})")


SIP_TRUNK_TRANSPORTS = ("udp", "tcp", "tls")


@dataclass
class SipTrunk:
    """A trunk outbound calls go out through (`POST /v1/calls`, docs/sip.md#outbound-calls)."""

    name: str = ""  # what `POST /v1/calls` names as `trunk`
    address: str = ""  # the trunk's SIP server, host[:port]; 5060 when no port is given (5061 over tls)
    # udp: from the UDP listener; tcp, tls: over a connection voxgate opens to the trunk (tls: verified, below)
    transport: str = "udp"
    user: str | None = None  # digest user name, answered on 401/407; needs password_env
    password_env: str | None = None  # env var holding the digest password (never in the file)
    from_: str = ""  # key `from`: our address in From, e.g. "sip:+15550100@sip.trunk.example"; a call may override it
    # off | optional (SDES keys offered in RTP/AVP: SRTP when the answer carries a key, else plain RTP) | required
    # (an RTP/SAVP offer; an answer without a key ends the call). optional and required need transport: tls
    srtp: str = "off"
    # PEM CA certificates the trunk's TLS certificate is checked against; unset: sip.tls.ca_file, else the system's
    ca_file: str | None = None

    def validate(self, check) -> None:
        check(bool(re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", self.name)), "name", "must be 1..64 of A-Z a-z 0-9 _ . -")
        check(
            sip_registrar(self.address) is not None and re.match(r"sips?:", self.address) is None,
            "address",
            "must be HOST[:PORT] (e.g. sip.trunk.example:5060)",
        )
        check(
            self.transport in SIP_TRUNK_TRANSPORTS,
            "transport",
            f"must be one of {', '.join(SIP_TRUNK_TRANSPORTS)}",
        )
        check(
            self.user is None
            or (bool(self.user) and self.user.isprintable() and not any(c in self.user for c in ' "\\@:')),
            "user",
            "must be a user name without spaces, quotes, backslashes, @ or :",
        )
        check((self.user is None) == (self.password_env is None), "password_env", "and user go together (digest)")
        if self.password_env is not None:
            check(
                bool(os.environ.get(self.password_env)),
                "password_env",
                f"names {self.password_env!r}, but that environment variable is empty or unset",
            )
        check(sip_uri_ok(self.from_), "from", "must be a SIP URI with a user, e.g. sip:+15550100@sip.trunk.example")
        check(self.srtp in SIP_SRTP_MODES, "srtp", f"must be one of {', '.join(SIP_SRTP_MODES)}")
        check(
            self.srtp == "off" or self.transport == "tls",
            "srtp",
            "needs transport: tls: SDES keys travel in the SDP, which anyone on the path reads over plain SIP",
        )
        if self.ca_file is not None:
            check(self.transport == "tls", "ca_file", "is for a tls trunk's certificate (transport is not tls)")
            check(os.path.isfile(self.ca_file), "ca_file", "must name a readable PEM file of CA certificates")

    def target(self) -> tuple[str, int]:
        """(host, port) of the trunk; without a port in `address`, SIP's default for the transport (5061 over TLS,
        RFC 3261 §19.1.2)."""
        host, port = sip_registrar(self.address)
        explicit = re.search(r":\d{1,5}$", self.address.strip()) is not None
        return host, port if explicit or self.transport != "tls" else 5061


SIP_CODECS = ("PCMU", "PCMA")
SIP_SRTP_MODES = ("off", "optional", "required")


@dataclass
class SipConfig:
    """Direct SIP (gateway/legs/sip.py, docs/sip.md): a trunk or PBX sends INVITEs here; RTP on `rtp_ports`."""

    port: int | None = None  # enables the SIP leg, UDP and TCP on this port; 5060 is the usual one
    host: str | None = None  # bind address; defaults to server.host
    # trunk/PBX addresses (IPs/CIDRs) that may send INVITEs; others get 403. Required (closed by default):
    # ["0.0.0.0/0"] says "anyone" and is logged as a warning at start
    allow: list[str] = field(default_factory=list)
    rtp_ports: str = "20000-20999"  # RTP range (each call takes an even port for RTP and the odd one above it for RTCP)
    public_ip: str | None = None  # the address written into SDP (behind NAT)
    codecs: list[str] = field(
        default_factory=lambda: list(SIP_CODECS)
    )  # codecs accepted; the caller's offer order picks among them
    # accounts to REGISTER at a provider's registrar: each {server, user, password_env, expires} (docs/sip.md)
    register: list[SipRegistration] = field(default_factory=list)
    answer_delay_ms: float = 0.0  # ring (180) this long before answering
    ack_timeout_s: float = 32.0  # a 200 OK not ACKed within this ends the call with BYE (RFC 3261 Timer H: 64*T1)
    rtp_timeout_s: float = (
        30.0  # no RTP from the caller for this long (not on hold) ends the call with BYE: it vanished
    )
    # a TCP connection that carries no call and sends nothing for this long is closed (it would hold a per-IP slot)
    tcp_idle_s: float = 120.0
    # new INVITEs admitted per second from one source address (token bucket holding one second's worth); the
    # rest get 503 with Retry-After. A trunk sends all its calls from a few addresses: size it to its call rate
    invites_per_source_per_s: float = 20.0
    # globs over the whole target URI that call.transfer may REFER to (e.g. "tel:+4420*", "sip:*@pbx.example.com");
    # empty: every transfer is refused (transfer_not_allowed), as an LLM-driven agent could be talked into any target
    transfer_targets: list[str] = field(default_factory=list)
    # digest authentication of inbound INVITEs: {realm, users: [{user, password_env}], algorithms, combine, ...};
    # unset: sip.allow alone decides (docs/sip.md#authentication)
    auth: SipAuthConfig | None = None
    # INVITE headers copied into call.attached's `sip.headers` for the agent (e.g. ["X-Customer-Id"]); From, To,
    # P-Asserted-Identity and Diversion are always read; Authorization and Proxy-Authorization are never passed
    pass_headers: list[str] = field(default_factory=list)
    # session timers (RFC 4028) for callers whose INVITE asks for them (Session-Expires) and on outbound INVITEs:
    # the interval we ask for, and the smallest we accept (a smaller Session-Expires gets 422 with this Min-SE);
    # 90 is RFC 4028's floor
    session_expires_s: int = 1800
    min_se_s: int = 90
    greeting: str | None = None  # spoken when the call connects and no agent attached (demo); None: silence
    # SIP over TLS: {port, cert_file, key_file, ca_file, require_client_cert}; unset: no TLS listener
    tls: SipTlsConfig | None = None
    # which listeners open: udp and tcp on `port`, tls on tls.port (when sip.tls is set); [tls] switches plain SIP off
    transports: list[str] = field(default_factory=lambda: list(SIP_TRANSPORTS))
    # SRTP (SDES, RFC 4568) for calls over TLS: off | optional (either offer) | required (a plain RTP offer gets
    # 488); optional and required need sip.tls, as SDES keys travel in the SDP. Calls over UDP/TCP never get SRTP
    srtp: str = "off"
    # trunks outbound calls go out through: each {name, address, transport, user, password_env, from, srtp, ca_file}
    trunks: list[SipTrunk] = field(default_factory=list)

    def validate(self, check) -> None:
        check(
            bool(self.transports)
            and all(t in SIP_TRANSPORTS for t in self.transports)
            and len(set(self.transports)) == len(self.transports),
            "transports",
            f"must list some of {', '.join(SIP_TRANSPORTS)}, each once",
        )
        check(
            "udp" in self.transports or "tcp" in self.transports or self.tls is not None,
            "transports",
            "lists only tls but sip.tls is not set: no listener would open",
        )
        check(
            not self.register or "udp" in self.transports,
            "register",
            "needs udp in sip.transports (registrations go out over UDP)",
        )
        check(
            90 <= self.min_se_s <= self.session_expires_s <= 86400,
            "min_se_s",
            "and session_expires_s must satisfy 90 <= min_se_s <= session_expires_s <= 86400",
        )
        check(self.srtp in SIP_SRTP_MODES, "srtp", f"must be one of {', '.join(SIP_SRTP_MODES)}")
        check(
            self.srtp == "off" or self.tls is not None,
            "srtp",
            "needs sip.tls: SDES keys travel in the SDP, which anyone on the path reads over plain SIP",
        )
        if self.port is not None:
            check(0 <= self.port <= 65535, "port", "must be 0..65535")
        check(_are_networks(self.allow), "allow", "entries must be IP addresses or CIDR networks")
        check(
            self.public_ip is None or _is_ip(self.public_ip),
            "public_ip",
            "must be an IP address (what SDP's c= line carries)",
        )
        check(
            sip_port_range(self.rtp_ports) is not None,
            "rtp_ports",
            "must be FIRST-LAST, two ports 1024..65535 with room for one even/odd pair",
        )
        check(
            bool(self.codecs) and all(c in SIP_CODECS for c in self.codecs),
            "codecs",
            f"must list some of {', '.join(SIP_CODECS)}",
        )
        check(self.answer_delay_ms >= 0, "answer_delay_ms", "must be >= 0")
        check(self.ack_timeout_s > 0, "ack_timeout_s", "must be > 0")
        check(self.rtp_timeout_s >= 1, "rtp_timeout_s", "must be >= 1")
        check(self.tcp_idle_s > 0, "tcp_idle_s", "must be > 0")
        check(self.invites_per_source_per_s > 0, "invites_per_source_per_s", "must be > 0")
        check(
            all(isinstance(t, str) and t and t.isprintable() and " " not in t for t in self.transfer_targets),
            "transfer_targets",
            "entries must be non-empty URI globs without spaces (e.g. tel:+4420*)",
        )
        if self.port is not None:
            check(
                bool(self.allow) or self.auth is not None,
                "allow",
                "is empty and sip.auth is not set: a SIP port open to anyone is refused. List your trunk's or PBX's "
                'addresses in sip.allow (["0.0.0.0/0"] for anyone), or require credentials with sip.auth',
            )
        from gateway.sip.identity import pass_header_names

        try:
            pass_header_names(self.pass_headers)
        except ValueError as exc:
            check(False, "pass_headers", str(exc).removeprefix("sip.pass_headers: "))
        if self.auth is not None and self.auth.combine == "both":
            check(
                bool(self.allow),
                "allow",
                "is empty but sip.auth.combine is both (sip.allow and credentials): no source could call. "
                "List the trunk's addresses in sip.allow, or set sip.auth.combine: either",
            )
        for i, registration in enumerate(self.register):  # list items are not walked by _validate_tree
            registration.validate(lambda ok, key, message, i=i: check(ok, "register", f"[{i}].{key} {message}"))
        for i, trunk in enumerate(self.trunks):
            trunk.validate(lambda ok, key, message, i=i: check(ok, "trunks", f"[{i}].{key} {message}"))
        names = [t.name for t in self.trunks]
        check(len(set(names)) == len(names), "trunks", "name the same trunk twice")
        check(
            all(t.transport in self.transports for t in self.trunks),
            "trunks",
            "use a transport sip.transports does not open (calls go out from its listener)",
        )
        check(
            self.tls is not None or all(t.transport != "tls" for t in self.trunks),
            "trunks",
            "use transport tls but sip.tls is not set (its listener takes the trunk's requests; its certificate is "
            "ours)",
        )
        for i, trunk in enumerate(self.trunks):
            ca_file = trunk.ca_file or (self.tls.ca_file if self.tls is not None else None)
            if trunk.transport == "tls" and ca_file is not None and os.path.isfile(ca_file):
                try:
                    ssl.create_default_context(cafile=ca_file)
                except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                    check(False, "trunks", f"[{i}]: {ca_file} does not load as PEM CA certificates ({exc})")


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def sip_registrar(text: str) -> tuple[str, int] | None:
    """`sip:provider.example.com:5080` (or without `sip:`) as (host, port), or None when it is not one."""
    m = re.fullmatch(r"(?:sips?:)?([A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\])(?::(\d{1,5}))?", (text or "").strip())
    if m is None or (m.group(2) is not None and not 0 < int(m.group(2)) <= 65535):
        return None
    return m.group(1).strip("[]"), int(m.group(2) or 5060)


def sip_uri_ok(text: str) -> bool:
    """`sip:user@host[:port]` (or sips:), as a trunk's `from` must be."""
    # printable ASCII only (RFC 3261 §25.1): no control byte or raw UTF-8 goes onto the wire in our From
    return re.fullmatch(r"sips?:[!#-;=?A-~]+@[A-Za-z0-9.\-]+(?::\d{1,5})?", text or "") is not None


def sip_port_range(text: str) -> tuple[int, int] | None:
    """`20000-20999` as (20000, 20999), or None when it is not a usable range."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", text or "")
    if m is None:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    return (first, last) if 1024 <= first and last <= 65535 and last - first >= 2 else None


def _default_voices() -> dict[str, VoiceConfig]:
    return {"default": VoiceConfig()}


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    simulated: SimulatedConfig = field(default_factory=SimulatedConfig)
    playout: PlayoutConfig = field(default_factory=PlayoutConfig)
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    voices: dict[str, VoiceConfig] = field(default_factory=_default_voices)
    default_voice: str | None = None  # defaults to the first voice
    telephony: TelephonyConfig = field(default_factory=TelephonyConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    webrtc: WebrtcConfig = field(default_factory=WebrtcConfig)
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
    stt: SttConfig = field(default_factory=SttConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    sip: SipConfig = field(default_factory=SipConfig)
    source: str = "<defaults>"

    def validate(self, check) -> None:
        check(len(self.voices) >= 1, "voices", "must name at least one voice")
        if self.engine.kind == "remote" and not self.engine.endpoints and not self.cluster.enabled:
            raise ConfigError(
                f"{self.source}: engine.endpoints: must list at least one engine for kind: remote "
                "(or set cluster.redis_url: engines register themselves there)"
            )
        if self.engine.kind == "openai-speech" and self.chunker.mode == "turn":
            raise ConfigError(
                f"{self.source}: chunker.mode: turn is unsupported_mode with engine.kind: openai-speech "
                "(speech servers take a whole text per request and no streaming text input yet); use sentence"
            )
        if self.default_voice is not None:
            check(self.default_voice in self.voices, "default_voice", f"{self.default_voice!r} is not in voices")
        seen: dict[str, str] = {}
        for name, voice in self.voices.items():
            for alias in voice.aliases:
                key = alias.lower()
                clash = seen.get(key) or next((v for v in self.voices if v.lower() == key and v != name), None)
                if clash is not None:
                    raise ConfigError(
                        f"{self.source}: voices.{name}.aliases: {alias!r} is already the name or an alias of voice {clash!r}"
                    )
                seen[key] = name

    def resolve_voice(self, name: str) -> str:
        """A voice's name from its name or one of its aliases (aliases match in any case); unknown names come back as given."""
        if name in self.voices:
            return name
        key = name.lower()
        return next((v for v, cfg in self.voices.items() if key in (a.lower() for a in cfg.aliases)), name)

    @property
    def default_voice_name(self) -> str:
        return self.default_voice or next(iter(self.voices))


# ---------------------------------------------------------------- loading


def load_config(path: str | os.PathLike | None = None, overrides: dict | None = None) -> Config:
    """Load and validate a YAML config; `None` gives the defaults.

    `VOXGATE_MODEL_DIR` fills `engine.model_dir` when the file leaves it empty.
    """
    source = str(path) if path else "<defaults>"
    data: Any = {}
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read config: {exc.strerror or exc}") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    data = dict(data)
    data.pop("source", None)
    if overrides:
        data = _merge(data, overrides)
    cfg = _build(Config, data, source, "")
    cfg.source = source
    for voice in cfg.voices.values():  # reference recordings are found from the config file's folder
        if voice.ref_audio and path and not os.path.isabs(voice.ref_audio):
            voice.ref_audio = os.path.join(os.path.dirname(os.path.abspath(path)), voice.ref_audio)
    if not cfg.engine.model_dir and os.environ.get("VOXGATE_MODEL_DIR"):
        cfg.engine.model_dir = os.environ["VOXGATE_MODEL_DIR"]
    _validate_tree(cfg, source, "")
    return cfg


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _where(source: str, path: str) -> str:
    return f"{source}: {path or '<top level>'}"


def _build(cls, data: Any, source: str, path: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{_where(source, path)}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    # a field named like a Python keyword (`from_`) is read from the key without its underscore (`from`)
    fields = {f.name.rstrip("_"): f for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"{_where(source, key)}: unknown key (known: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        key = f"{path}.{name}" if path else name
        attr = fields[name].name
        kwargs[attr] = _coerce(hints[attr], value, source, key)
    return cls(**kwargs)


def _coerce(tp, value: Any, source: str, path: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, source, path)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value if value is not None else {}, source, path)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{_where(source, path)}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, source, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{_where(source, path)}: expected a mapping, got {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {str(k): _coerce(item, v, source, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{_where(source, path)}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{_where(source, path)}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{_where(source, path)}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if value is False and (path in _OFF_SWITCHES or re.fullmatch(r"sip\.trunks\[\d+\]\.srtp", path)):
            value = "off"  # YAML 1.1 reads a bare `off` as false
        if not isinstance(value, str):
            raise ConfigError(f"{_where(source, path)}: expected a string, got {value!r}")
        return value
    return value


_OFF_SWITCHES = ("barge_in.mode", "stt.kind", "sip.srtp")  # string settings whose value may be written as a bare `off`


def _validate_tree(obj, source: str, path: str) -> None:
    def check(ok: bool, key: str, message: str) -> None:
        if not ok:
            full = f"{path}.{key}" if path else key
            raise ConfigError(f"{_where(source, full)}: {message} (got {getattr(obj, key, None)!r})")

    if hasattr(obj, "validate"):
        obj.validate(check)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        sub = f"{path}.{f.name}" if path else f.name
        if dataclasses.is_dataclass(value):
            _validate_tree(value, source, sub)
        elif isinstance(value, dict):
            for k, v in value.items():
                if dataclasses.is_dataclass(v):
                    _validate_tree(v, source, f"{sub}.{k}")
