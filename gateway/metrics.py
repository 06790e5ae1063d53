"""Prometheus metrics of one gateway (its own registry, so several gateways can share a process)."""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gateway.runtime_stats import RuntimeCollector

_LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
_LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32)


class GatewayMetrics:
    def __init__(self, engine_stats: Callable[[], dict], engine_kind: str, vocoder: str | Callable[[], str] = "none"):
        r = self.registry = CollectorRegistry()
        self.sessions_active = Gauge("voxgate_sessions_active", "Sessions now open", registry=r)
        self.sessions_total = Counter(
            "voxgate_sessions_total",
            "Sessions started, by the leg that created them (a telephony call attached first by its agent counts as control)",
            ["leg"],
            registry=r,
        )
        self.ttfa = Histogram(
            "voxgate_ttfa_seconds", "Time to first audio per turn (playout)", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.underruns = Counter(
            "voxgate_underruns_total", "Playout underruns inside utterances", ["kind", "cause"], registry=r
        )
        self.underrun_seconds = Counter(
            "voxgate_underrun_seconds_total", "Silence inside utterances", ["kind"], registry=r
        )
        self.turns = Counter("voxgate_turns_total", "Turns finished", ["interrupted"], registry=r)
        self.errors = Counter("voxgate_errors_total", "Error events sent", ["code"], registry=r)
        self.frames_sent = Counter("voxgate_frames_sent_total", "20 ms audio frames sent", ["leg"], registry=r)
        self.frames_dropped = Counter(
            "voxgate_frames_dropped_total", "Frames not sent: the client's socket was backed up", registry=r
        )
        self.rtp_dropped = Counter(
            "voxgate_rtp_dropped_total",
            "SIP RTP/RTCP packets dropped by strict RTP: from a source that is not the call's media peer",
            ["reason"],
            registry=r,
        )
        self.connections_refused = Counter(
            "voxgate_connections_refused_total",
            "Connections refused at the door: max_connections_per_ip, connections_per_ip_per_s, origin, "
            "audiosocket_allow, twilio_unsigned, token, sip_allow, sip_tcp_idle (an idle SIP TCP connection without a call)",
            ["reason"],
            registry=r,
        )
        self.chunks = Counter("voxgate_text_chunks_total", "Text chunks sent to the engine", registry=r)
        self.clock_lateness = Histogram(
            "voxgate_clock_lateness_seconds",
            "How late each shared-clock tick ran against its schedule",
            buckets=_LATENESS_BUCKETS,
            registry=r,
        )
        self.clock_skipped = Counter(
            "voxgate_clock_skipped_ticks_total", "Ticks dropped after a long stall", registry=r
        )
        self.clock_stalled = Counter(
            "voxgate_clock_stall_seconds_total",
            "Time of the shared clock's long stalls, by where the loop thread's time went: ran (this process's own "
            "work), cpu_wait (runnable, the cores busy with others), stolen (by the host), blocked (a blocking call, "
            "a lock or the GIL)",
            ["part"],
            registry=r,
        )
        # The per-frame path's own CPU, apart from the engine, the text path and the doors: what a frame costs to play
        self.clock_tick_cpu = Counter(
            "voxgate_clock_tick_cpu_seconds_total",
            "CPU time (this thread's) inside the shared clock's ticks: every clock-driven call's frame",
            registry=r,
        )
        self.clock_member_ticks = Counter(
            "voxgate_clock_member_ticks_total", "Calls ticked by the shared clock (one per call per tick)", registry=r
        )
        self.engine_queue = Gauge("voxgate_engine_queue_depth", "Requests waiting in the engine", registry=r)
        self.engine_active = Gauge("voxgate_engine_active_requests", "Requests the engine is serving", registry=r)
        # vocoder: the backend actually serving, read at scrape time (known only once the engine loaded)
        r.register(_EngineInfo(engine_kind, vocoder if callable(vocoder) else (lambda: vocoder)))
        r.register(_EngineStats(engine_stats))
        r.register(RuntimeCollector())  # memory, fds, tasks, threads, GC pauses: what a soak watches
        self.engine_queue.set_function(lambda: engine_stats().get("queued", 0))
        self.engine_active.set_function(lambda: engine_stats().get("active", 0))
        self.engine_audio = Gauge("voxgate_engine_audio_seconds", "Audio seconds produced by the engine", registry=r)
        self.engine_audio.set_function(lambda: engine_stats().get("audio_seconds", 0.0))
        # the call plane (gateway/cluster/): legs spliced to the node that owns their call, and Redis failures
        self.cluster_forwards = Counter(
            "voxgate_cluster_forwards_total",
            "Legs forwarded one hop to the node that owns their call",
            ["door"],
            registry=r,
        )
        self.cluster_redis_errors = Counter(
            "voxgate_cluster_redis_errors_total", "Redis requests that failed (the plane was unavailable)", registry=r
        )
        # the caller's voice (gateway/core/caller_voice.py)
        self.voice_barge_ins = Counter(
            "voxgate_voice_barge_ins_total", "Turns interrupted by the caller's voice", registry=r
        )
        self.voice_false_interruptions = Counter(
            "voxgate_voice_false_interruptions_total",
            "Playout paused at a speech onset and resumed: the speech was shorter than min_speech_ms",
            registry=r,
        )
        self.voice_speech_events = Counter("voxgate_voice_speech_total", "user.speech started events", registry=r)
        self.voice_inbound_dropped_samples = Counter(
            "voxgate_voice_inbound_dropped_samples_total",
            "Caller audio samples dropped for arriving faster than real time",
            registry=r,
        )

        # POST /v1/audio/speech: requests being answered now (a chained gateway's interrupt shows here as a drop)
        self.speech_in_flight = Gauge(
            "voxgate_speech_requests_in_flight", "POST /v1/audio/speech requests being answered now", registry=r
        )

    def count_stall(self, cause) -> None:
        """A long clock stall (gateway/core/stall_cause.StallCause), split by where its time went."""
        for part, ms in (
            ("ran", cause.ran_ms),
            ("cpu_wait", cause.cpu_wait_ms),
            ("stolen", cause.stolen_ms),
            ("blocked", cause.blocked_ms),
        ):
            self.clock_stalled.labels(part=part).inc(ms / 1000)

    def watch_speech_endpoints(self, endpoint_stats: Callable[[], list[dict]]) -> None:
        """engine.kind openai-speech: per speech server, up, in flight, first-byte time and errors by code."""
        self.registry.register(_SpeechEndpoints(endpoint_stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineStats:
    """Every numeric counter the engine reports (steps, host syncs, preemptions, …) as `voxgate_engine_stat{name}`."""

    def __init__(self, engine_stats: Callable[[], dict]):
        self.engine_stats = engine_stats

    def describe(self):
        return []

    def collect(self):
        family = GaugeMetricFamily("voxgate_engine_stat", "Engine counters as the engine reports them", labels=["name"])
        for name, value in sorted(self.engine_stats().items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric([name], float(value))
        yield family


class _SpeechEndpoints:
    """`voxgate_speech_endpoint_*{endpoint}`: the openai-speech engine's servers, read at each scrape."""

    def __init__(self, endpoint_stats: Callable[[], list[dict]]):
        self.endpoint_stats = endpoint_stats

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, SummaryMetricFamily

        up = GaugeMetricFamily("voxgate_speech_endpoint_up", "1 while the speech server serves", labels=["endpoint"])
        in_flight = GaugeMetricFamily(
            "voxgate_speech_endpoint_in_flight", "Requests streaming from the speech server now", labels=["endpoint"]
        )
        ttfb = SummaryMetricFamily(
            "voxgate_speech_endpoint_ttfb_seconds", "Request sent to first audio byte", labels=["endpoint"]
        )
        errors = CounterMetricFamily(
            "voxgate_speech_endpoint_errors", "Failed requests by code", labels=["endpoint", "code"]
        )
        for e in self.endpoint_stats():
            up.add_metric([e["endpoint"]], 1.0 if e["up"] else 0.0)
            in_flight.add_metric([e["endpoint"]], float(e["in_flight"]))
            ttfb.add_metric([e["endpoint"]], count_value=e["ttfb_count"], sum_value=e["ttfb_sum_s"])
            for code, n in sorted(e["errors"].items()):
                errors.add_metric([e["endpoint"], code], float(n))
        yield from (up, in_flight, ttfb, errors)


class _EngineInfo:
    """`voxgate_engine_info{kind, vocoder} 1`, the vocoder label asked of the engine at each scrape."""

    def __init__(self, kind: str, vocoder: Callable[[], str]):
        self.kind, self.vocoder = kind, vocoder

    def describe(self):
        return []

    def collect(self):
        family = GaugeMetricFamily("voxgate_engine_info", "Engine serving this gateway", labels=["kind", "vocoder"])
        family.add_metric([self.kind, str(self.vocoder())], 1.0)
        yield family
