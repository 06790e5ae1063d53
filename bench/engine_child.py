"""An engine of exact bench settings as its own process, for `voxgate bench --remote`.

`voxgate engine` builds its engine from a gateway config; a bench needs the very `EngineSettings` of its
in-process run (fixed frame counts, sequence length), so this child takes them as JSON and serves them with
the same `tts.service.EngineServer`. Prints one line, `ready ENDPOINT`, once it serves; SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys


async def serve(settings: dict, listen: str, heartbeat_s: float, favour: bool = True) -> None:
    from tts.qwen3.engine import EngineSettings, Qwen3Engine
    from tts.service import EngineServer, favour_the_loop, secret_from_env

    if favour:
        favour_the_loop()
    fields = EngineSettings.__dataclass_fields__
    s = EngineSettings(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in settings.items() if k in fields})
    engine = Qwen3Engine(s)
    await engine.start()
    server = EngineServer(engine, listen, secret=secret_from_env([listen]), heartbeat_s=heartbeat_s)
    await server.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"ready {server.endpoint} threads {engine.cpu_threads}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
        await engine.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", required=True, help="EngineSettings fields as JSON")
    p.add_argument("--listen", required=True)
    p.add_argument("--heartbeat-s", type=float, default=2.0)
    p.add_argument("--default-switch-interval", action="store_true", help="keep Python's 5 ms GIL switch interval")
    args = p.parse_args(argv)
    asyncio.run(serve(json.loads(args.settings), args.listen, args.heartbeat_s, not args.default_switch_interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
