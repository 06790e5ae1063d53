"""First audio and total time through the Pipecat and LiveKit plugins, against each framework's OpenAI route.

    .venv/bin/python -m bench.plugin_latency [--reps 3] [--config configs/simulated.yaml]

Starts a gateway in this process (the config's engine; SimulatedEngine by default) and runs the
scenarios of tests/plugins/ in .venv-plugins (scripts/install_plugin_deps.sh): the same three
sentences as an LLM-like token stream (a token every 25 ms) through

* Pipecat: `VoxgateTTSService` vs `OpenAITTSService(base_url=…/v1)` in a pipeline with a real-time
  output transport (first audio = the first TTSAudioRawFrame out of the service; total = its last);
* LiveKit Agents: `voxgate.TTS().stream()` vs `StreamAdapter(openai.TTS(base_url=…/v1))` (what
  LiveKit offers for a TTS without streaming).

Times count from the first token. Prints a markdown table of medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from gateway.app import Gateway
from gateway.config import load_config
from tests.plugins.conftest import PLUGIN_PYTHON, run_scenario

CASES = [
    ("Pipecat", "pipecat_scenario.py", "voxgate", "VoxgateTTSService (/v1/ws, unpaced)"),
    ("Pipecat", "pipecat_scenario.py", "openai", "OpenAITTSService (/v1/audio/speech)"),
    ("LiveKit Agents", "livekit_scenario.py", "voxgate", "voxgate.TTS().stream() (/v1/ws, unpaced)"),
    ("LiveKit Agents", "livekit_scenario.py", "openai", "StreamAdapter(openai.TTS) (/v1/audio/speech)"),
]


async def main(reps: int, config: str) -> None:
    if not PLUGIN_PYTHON.exists():
        raise SystemExit("no .venv-plugins: run scripts/install_plugin_deps.sh first")
    cfg = load_config(config, {"server": {"max_sessions": 100}})
    gw = Gateway(cfg)
    await gw.start(host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{gw.port}"
    rows = []
    try:
        for framework, script, kind, label in CASES:
            first, total = [], []
            for _ in range(reps):
                out = (await run_scenario(script, url, "stream", kind, timeout=300))["stream"]
                first.append(out["first_audio_s"] * 1000)
                total.append(out["last_audio_s"] * 1000)
            rows.append((framework, label, statistics.median(first), statistics.median(total), out["audio_ms"]))
    finally:
        await gw.stop()
    print(f"engine: {cfg.engine.kind}, {reps} runs each, medians; times from the first token\n")
    print("| framework | TTS | first audio | total (last audio out of the TTS) | audio |")
    print("|---|---|---|---|---|")
    for framework, label, f, t, a in rows:
        print(f"| {framework} | {label} | {f:.0f} ms | {t:.0f} ms | {a / 1000:.1f} s |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--config", default="configs/simulated.yaml")
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.config))
