"""Pure wire formats: one module per provider, encode/decode only (no sockets, no asyncio).

Decoders turn the provider's messages into small typed events (the shared
vocabulary is `gateway.wire.events`) and raise `gateway.protocol.ProtocolError`
(stable codes) for what they cannot use; encoders build exactly the bytes or
text the provider expects. The matching leg in `gateway/legs/` owns the
socket and the call's state.
"""
