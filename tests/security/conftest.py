from tests.telephony.conftest import make_gateway  # noqa: F401  (a gateway with the AudioSocket server on)
from tests.webrtc.conftest import gateway_factory  # noqa: F401  (a gateway with the simulated LLM, for WebRTC)
