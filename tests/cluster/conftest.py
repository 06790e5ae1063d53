"""In-process gateways for the path-id tests (the plane tests start their own processes)."""

from tests.telephony.conftest import gateway, make_gateway  # noqa: F401
