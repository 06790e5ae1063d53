"""LiveKit Agents plugin for voxgate: `from livekit.plugins import voxgate; voxgate.TTS(url=..., voice=...)`."""

from livekit.agents import Plugin

from .log import logger
from .tts import TTS, SynthesizeStream
from .version import __version__

__all__ = ["TTS", "SynthesizeStream", "__version__"]


class VoxgatePlugin(Plugin):
    def __init__(self) -> None:
        super().__init__(__name__, __version__, __package__, logger)


Plugin.register_plugin(VoxgatePlugin())
