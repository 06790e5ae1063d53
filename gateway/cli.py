"""`voxgate` command line (docs/getting-started.md shows the common commands).

The one entry point. It is the only module that may import `bench/` (lazily)
and `tts/` internals (for the model tools). Each subcommand's heavy imports
happen inside its handler so `voxgate --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys

VOCODERS = ("auto", "torch", "onnxruntime", "tensorrt")  # engine.vocoder's values (gateway/config.py)


# ------------------------------------------------------------------ serve
def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", default="configs/default.yaml", help="YAML config (default: %(default)s)")
    p.add_argument("--host", help="override server.host")
    p.add_argument("--port", type=int, help="override server.port")
    p.add_argument("--model-dir", help="override engine.model_dir (Qwen3-TTS checkpoint)")
    p.add_argument("--model", choices=["tiny"], help="'tiny': make (once) and serve a tiny random Qwen3 checkpoint")
    p.add_argument("--vocoder", choices=VOCODERS, help="override engine.vocoder (auto: the fastest available, logged)")
    p.add_argument("--advertise-url", help="override cluster.advertise_url (how other nodes reach this one)")
    p.add_argument("--node-id", help="override cluster.node_id")
    p.add_argument("--sip-public-ip", help="override sip.public_ip (the address SDP and Contact carry)")
    p.add_argument(
        "--isolate-engine",
        action="store_true",
        help="run the engine as a supervised child process (engine.isolate: true)",
    )
    p.add_argument(
        "--engine-endpoint",
        action="append",
        metavar="URL",
        help="use the `voxgate engine` at URL (tcp://HOST:PORT or ipc://PATH; repeat for several): "
        "engine.kind remote with these engine.endpoints",
    )
    p.add_argument(
        "--speech-endpoint",
        action="append",
        metavar="URL",
        help="speak through the OpenAI-compatible speech server at URL (http://HOST:PORT/v1: vLLM-Omni, "
        "SGLang-Omni, voxgate; repeat for several): engine.kind openai-speech with these engine.endpoints",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="N gateway processes sharing the port (SO_REUSEPORT), one node each; "
        "needs cluster.redis_url (gateway/workers.py)",
    )
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run_serve)


def _run_serve(args) -> int:
    from gateway.app import serve_main

    if args.model == "tiny":
        from tts.qwen3.tools import ensure_tiny_model  # model tools are tts internals: only the CLI reaches them

        args.model_dir = ensure_tiny_model()
    if args.workers is not None:
        from gateway.workers import serve_workers

        return serve_workers(args, args.workers)
    return serve_main(args)


# ------------------------------------------------------------------ engine
def _add_engine(sub) -> None:
    p = sub.add_parser("engine", help="serve one engine to gateways over a socket (engine.kind: remote connects to it)")
    p.add_argument(
        "--config",
        default="configs/default.yaml",
        help="YAML config: its engine, simulated and voices sections (default: %(default)s)",
    )
    p.add_argument("--listen", required=True, help="tcp://HOST:PORT (needs VOXGATE_ENGINE_SECRET) or ipc://PATH")
    p.add_argument(
        "--http-port", type=int, default=None, help="/healthz, /readyz and /metrics on this port (0: a free one)"
    )
    p.add_argument("--http-host", default=None, help="default: the --listen host (tcp), 127.0.0.1 (ipc)")
    p.add_argument(
        "--advertise",
        default=None,
        help="with cluster.redis_url: the endpoint gateways reach this engine at, "
        "registered in Redis (default: --listen, when it names a host)",
    )
    p.add_argument(
        "--heartbeat-s",
        type=float,
        default=2.0,
        help="a gateway silent this long is gone: its streams are freed (default: %(default)s)",
    )
    p.add_argument("--model-dir", help="override engine.model_dir (Qwen3-TTS checkpoint)")
    p.add_argument("--model", choices=["tiny"], help="'tiny': make (once) and serve a tiny random Qwen3 checkpoint")
    p.add_argument("--vocoder", choices=VOCODERS, help="override engine.vocoder")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run_engine)


def _run_engine(args) -> int:
    from gateway.engine_service import engine_main

    if args.model == "tiny":
        from tts.qwen3.tools import ensure_tiny_model

        args.model_dir = ensure_tiny_model()
    return engine_main(args)


# ------------------------------------------------------------------ synth
def _add_synth(sub) -> None:
    p = sub.add_parser("synth", help="speak one text to a WAV with a Qwen3-TTS checkpoint")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--speaker")
    p.add_argument("--language", default="auto")
    p.add_argument("--instruct")
    p.add_argument("--greedy", action="store_true", help="argmax for talker and code predictor, no repetition penalty")
    p.add_argument("--max-frames", type=int, default=None, help="at most N codec frames (80 ms each)")
    p.add_argument(
        "--streaming-text", action="store_true", help="streaming text layout instead of the official default"
    )
    p.add_argument("--normalize", action="store_true", help="apply the text frontend's normalisation first")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--vocoder", default="torch", choices=VOCODERS, help="codec decoder backend (default: %(default)s)")
    p.add_argument("--ref-audio", help="Base checkpoints: clone the voice of this WAV (1-30 s, any rate)")
    p.add_argument("--ref-text", help="the reference's transcript (in-context cloning, the default mode)")
    p.add_argument(
        "--x-vector-only", action="store_true", help="clone from the speaker embedding alone (no transcript)"
    )
    p.add_argument(
        "--non-streaming-text",
        action="store_true",
        help="cloned voices: the non-streaming text layout (default: generate_voice_clone's streaming one)",
    )
    p.add_argument("--out", required=True, help="the target speech (for in-context clones, without the reference)")
    p.add_argument("--codes-out", help="the generated frames only, [frames, 16] int64")
    p.add_argument(
        "--turn-mode",
        action="store_true",
        help="turn mode: feed the text word by word from an empty start into one streaming-layout "
        "generation (pauses while text is missing, end-of-speech held until the text is final)",
    )
    p.add_argument(
        "--text-rate",
        type=float,
        default=None,
        metavar="TOKENS_PER_S",
        help="turn mode: words arrive at this rate (an LLM token per word); default: all at once",
    )
    p.set_defaults(handler=_run_synth)


def _run_synth(args) -> int:
    from tts.qwen3.tools import synth_main

    return synth_main(args)


# ------------------------------------------------------------------ encode-audio / speaker-embedding
def _add_clone_tools(sub) -> None:
    p = sub.add_parser("encode-audio", help="a WAV's speech-tokenizer codes (the in-context clone prompt's frames)")
    p.add_argument("--model-dir", required=True, help="a Qwen3-TTS checkpoint or its speech_tokenizer/ folder")
    p.add_argument("wav")
    p.add_argument("--codes-out", required=True, help="F.npy: [frames, 16] int64")
    p.add_argument("--device", default="cpu")
    p.set_defaults(handler=_run_encode_audio)
    p = sub.add_parser("speaker-embedding", help="a WAV's x-vector from a Base checkpoint's speaker encoder")
    p.add_argument("--model-dir", required=True)
    p.add_argument("wav")
    p.add_argument("--out", required=True, help="F.npy: float32, 1-D")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.set_defaults(handler=_run_speaker_embedding)


def _run_encode_audio(args) -> int:
    from tts.qwen3.tools import encode_audio_main

    return encode_audio_main(args)


def _run_speaker_embedding(args) -> int:
    from tts.qwen3.tools import speaker_embedding_main

    return speaker_embedding_main(args)


# ------------------------------------------------------------------ make-tiny-model
def _add_make_tiny_model(sub) -> None:
    p = sub.add_parser("make-tiny-model", help="write a small random Qwen3-TTS checkpoint in the official layout")
    p.add_argument("dir")
    p.add_argument("--variant", default="1b7", choices=["0b6", "1b7"])
    p.add_argument("--type", default="custom_voice", choices=["custom_voice", "voice_design", "base"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=_run_make_tiny_model)


def _run_make_tiny_model(args) -> int:
    from tts.qwen3.tools import make_tiny_model_main

    return make_tiny_model_main(args)


# ------------------------------------------------------------------ bench
def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="measure the engine (stage timings, RTF, TTFA, concurrency sweep)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-dir")
    src.add_argument("--random-weights", choices=["0.6b", "1.7b"])
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--streaming", action="store_true")
    p.add_argument("--concurrency", default=None, help="comma-separated levels, e.g. 1,8,32")
    p.add_argument("--frames", type=int, default=None, help="fix the length in codec frames (EOS ignored)")
    p.add_argument("--max-batch", type=int, default=None)
    p.add_argument("--vocoder", default="auto", choices=VOCODERS, help="codec decoder backend (default: %(default)s)")
    p.add_argument("--json-output")
    p.add_argument("--trace")
    p.add_argument("--reference", action="store_true", help="also time the official qwen-tts on the same checkpoint")
    p.add_argument(
        "--cuda-semantics",
        action="store_true",
        help="CPU: SDPA answers in CUDA's layouts and refuses what CUDA refuses (tts.qwen3.cuda_semantics)",
    )
    p.add_argument(
        "--reference-threads", default="1,2", help="torch threads tried for the official run; its best counts"
    )
    p.add_argument("--arrivals", choices=["poisson", "burst"], help="realistic arrivals instead of --concurrency")
    p.add_argument(
        "--rate", default="2,4,8", help="poisson: comma-separated request rates (per second), one level each"
    )
    p.add_argument("--duration", type=float, default=10.0, help="poisson: seconds of arrivals per level")
    p.add_argument("--burst", type=int, default=32, help="burst: requests arriving at once")
    p.add_argument("--background", type=int, default=8, help="burst: streams already running when it arrives")
    p.add_argument(
        "--slo-first-audio-ms",
        type=float,
        default=250.0,
        help="poisson: a level passes with first audio p95 under this and every stream keeping up",
    )
    p.add_argument(
        "--aligner-dir",
        help="time word timings: each --concurrency level (default 1,16) with the Qwen3-ForcedAligner at DIR off "
        "and on, and the aligner alone (random:0.6b: the released shapes, random weights)",
    )
    p.add_argument("--serial", action="store_true", help="no vocoder lane (vocoder and talker take turns)")
    p.add_argument(
        "--serial-vocoder-rows",
        type=int,
        default=None,
        help="batches of at most N streams take the "
        "vocoder way measured faster, serial or on the lane (0: always the lane; default: the engine's)",
    )
    p.add_argument(
        "--remote",
        action="store_true",
        help="in-process against the same engine as its own process "
        "(tts.service), interleaved, at --concurrency (default 1,16)",
    )
    p.add_argument(
        "--remote-transport",
        default="tcp",
        choices=["tcp", "ipc"],
        help="with --remote: loopback tcp:// with CURVE, or ipc://",
    )
    p.add_argument("--remote-repeats", type=int, default=2, help="with --remote: interleaved rounds")
    p.add_argument(
        "--remote-switch-interval",
        default="fast",
        choices=["fast", "default"],
        help="with --remote: the engine process's GIL switch interval (fast: 0.5 ms, as voxgate engine)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--ref-audio", help="a cloned voice's cost before first audio (first use vs cached), this reference WAV"
    )
    p.add_argument("--ref-text", help="with --ref-audio: its transcript (in-context mode)")
    p.add_argument("--x-vector-only", action="store_true", help="with --ref-audio: x-vector-only mode")
    p.add_argument(
        "--turn-mode",
        action="store_true",
        help="turn mode against sentence mode on the same agent turns, "
        "fed word by word at --llm-rate (bench/turn_bench.py)",
    )
    p.add_argument(
        "--llm-rate",
        type=float,
        default=None,
        metavar="TOKENS_PER_S",
        help="with --turn-mode: the simulated LLM's rate (a word per token)",
    )
    p.add_argument("--turn-repeats", type=int, default=2, help="with --turn-mode: rounds over the turns")
    p.add_argument(
        "--turn-frames-per-token",
        type=float,
        default=None,
        help="with --turn-mode: frame cap per text token (4 + this; random tiny weights never end by EOS)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="with --reference or --turn-mode: draw the result into FILE (.png or "
        ".svg), its data beside it as FILE.json (bench/plots.py)",
    )
    p.set_defaults(handler=_run_bench)


def _check_plot(args, needs: str | None = None) -> str | None:
    """A --plot target that cannot be drawn fails before the run, with the reason."""
    if not getattr(args, "plot", None):
        return None
    from bench.plots import PlotError, check_target

    try:
        if needs:
            raise PlotError(f"--plot draws {needs}")
        check_target(args.plot, (getattr(args, "json_output", None),))
    except PlotError as e:
        return str(e)
    return None


def _run_bench(args) -> int:
    plain = args.turn_mode or (args.reference and not args.remote and not args.ref_audio)
    bad = _check_plot(
        args, None if plain else "the --reference or --turn-mode result only (not --remote or --ref-audio)"
    )
    if bad:
        print(f"voxgate bench: bad_args: {bad}", file=sys.stderr)
        return 2
    if args.aligner_dir:
        from bench.aligner_bench import aligner_bench_main

        return aligner_bench_main(args)
    if args.turn_mode:
        from bench.turn_bench import turn_bench_main

        return turn_bench_main(args)
    from bench.engine_bench import bench_main

    return bench_main(args)


# ------------------------------------------------------------------ export-vocoder
def _add_export_vocoder(sub) -> None:
    p = sub.add_parser(
        "export-vocoder", help="export the codec decoder's streaming step as ONNX (TensorRT / ONNX Runtime)"
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-dir", help="a Qwen3-TTS checkpoint (or its speech_tokenizer/ folder)")
    src.add_argument("--random-weights", choices=["released"], help="the released decoder shape with random weights")
    p.add_argument("--out", required=True, help="FILE.onnx")
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--max-batch", type=int, default=256, help="rows TensorRT profiles will span (default: %(default)s)")
    p.set_defaults(handler=_run_export_vocoder)


def _run_export_vocoder(args) -> int:
    from tts.qwen3.codec.export_cli import export_vocoder_main

    return export_vocoder_main(args)


# ------------------------------------------------------------------ loadtest
def _add_loadtest(sub) -> None:
    p = sub.add_parser("loadtest", help="replay calls against a gateway at rising concurrency")
    p.add_argument("--gateway", help="ws(s)://host:port of a running gateway (else one is started per --config)")
    p.add_argument("--config", action="append", default=[], help="config to start a local gateway with (twice for A/B)")
    p.add_argument("--ab", help="second gateway URL for an A/B run")
    p.add_argument("--scenarios", default=None, help="scenario file (default: bench/scenarios/ built-in set)")
    p.add_argument("--levels", default="10,20,40")
    p.add_argument("--window", type=float, default=30.0, help="sustained seconds measured per level")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="run folder (default: runs/<timestamp>)")
    p.add_argument("--wav", action="store_true", help="write per-call WAV of what the caller heard")
    p.add_argument("--api-key")
    p.add_argument(
        "--ramp", type=float, default=None, help="ramp-up seconds per level (default: 0.1 s per caller, 2..10 s)"
    )
    p.add_argument("--settle", type=float, default=5.0, help="seconds after the ramp before the window opens")
    p.add_argument("--voice", help="voice for every call (default: the scenario's, else the gateway's default)")
    p.add_argument("--encoding", default="pcm16", choices=["pcm16", "mulaw", "alaw"])
    p.add_argument("--sample-rate", type=int, default=24000)
    p.add_argument("--client-prebuffer-ms", type=float, default=60.0, help="the simulated caller's jitter buffer")
    p.add_argument("--llm-ttft-ms", type=float, default=300.0, help="simulated LLM time to first token")
    p.add_argument("--llm-tokens-per-s", type=float, default=40.0)
    p.add_argument("--llm-jitter", type=float, default=0.2, help="relative spread of LLM timings (seeded)")
    p.add_argument("--turn-timeout", type=float, default=60.0, help="a turn not heard to its end by then is an error")
    p.add_argument("--slo-ttfa-p95-ms", type=float, default=800.0)
    p.add_argument("--slo-e2e-p95-ms", type=float, default=2000.0)
    p.add_argument("--slo-audible-per-turn", type=float, default=0.2)
    p.add_argument("--slo-error-rate", type=float, default=0.01)
    p.add_argument("--slo-gaps-from", default="heard", choices=["heard", "server"], help="which gaps the SLO counts")
    p.add_argument(
        "--leg",
        default="native",
        choices=["native", "twilio"],
        help="native: /v1/ws; twilio: /v1/twilio media + /v1/control text",
    )
    p.add_argument(
        "--stub",
        action="store_true",
        help="against a near-free stub gateway: measures how many callers this client drives",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw TTFA and audible gaps against callers into FILE (.png or .svg), "
        "the run's data beside it as FILE.json (bench/plots.py)",
    )
    p.set_defaults(handler=_run_loadtest)


def _run_loadtest(args) -> int:
    bad = _check_plot(args)
    if bad:
        print(f"voxgate loadtest: {bad}")
        return 2
    from bench.loadtest import loadtest_main

    return loadtest_main(args)


# ------------------------------------------------------------------ normalize
def _add_normalize(sub) -> None:
    p = sub.add_parser("normalize", help="print the spoken form of a text")
    p.add_argument("--lang", default="auto", choices=["auto", "ru", "en"])
    p.add_argument("--stress", action="store_true", help="add Russian stress marks (silero-stress)")
    p.add_argument("text")
    p.set_defaults(handler=_run_normalize)


def _run_normalize(args) -> int:
    from tts.frontend.cli import normalize_main

    return normalize_main(args)


# ------------------------------------------------------------------ drain
def _add_drain(sub) -> None:
    p = sub.add_parser("drain", help="preStop hook: start a gateway's drain (SIGTERM) and wait while calls remain")
    p.add_argument(
        "--pid", type=int, default=1, help="the gateway's process (default: %(default)s, a container's main process)"
    )
    p.add_argument("--port", type=int, default=8080, help="its HTTP port, where /readyz reports the calls it holds")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--timeout", type=float, default=3660.0, help="give up after this many seconds (default: %(default)s)"
    )
    p.add_argument("--poll", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(handler=_run_drain)


def _run_drain(args) -> int:
    from gateway.prestop import drain_and_wait

    drain_and_wait(args.pid, args.port, args.host, args.timeout, args.poll)
    return 0


# ------------------------------------------------------------------ call
def _add_call(sub) -> None:
    from gateway.call_command import add_arguments

    p = sub.add_parser("call", help="place an outbound SIP call through a running gateway and speak into it")
    add_arguments(p)
    p.set_defaults(handler=_run_call)


def _run_call(args) -> int:
    from gateway.call_command import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="voxgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_serve,
        _add_engine,
        _add_synth,
        _add_clone_tools,
        _add_make_tiny_model,
        _add_bench,
        _add_export_vocoder,
        _add_loadtest,
        _add_normalize,
        _add_drain,
        _add_call,
    ):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a bench's --plot records as its command
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
