"""The engine as its own service (docs/engine.md, docs/engine-protocol.md).

* `wire` — the protocol's messages (msgspec structs over msgpack; PCM as raw frames), pure encode/decode;
* `transport` — ZeroMQ sockets, endpoints and CURVE security for tcp://;
* `server` — `EngineServer`: one `tts.Engine` served to any number of gateways;
* `link` — `EngineLink`: a gateway's one multiplexed connection to one engine;
* `remote` — `RemoteEngine`: the `tts.Engine` interface over several engines (placement, stickiness, failover).

Needs the `service` extra (pyzmq, msgspec); `import tts` does not import this package.
"""

from tts.service.server import EngineServer, favour_the_loop
from tts.service.transport import check_endpoint, secret_from_env
from tts.service.wire import SECRET_ENV, VERSION

__all__ = ["EngineServer", "favour_the_loop", "check_endpoint", "secret_from_env", "SECRET_ENV", "VERSION"]
