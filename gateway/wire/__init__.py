"""Wire formats: pure encode/decode of each provider's media protocol (no sockets, no asyncio).

One file per provider. Decoders turn the provider's messages into small typed
events and raise `gateway.protocol.ProtocolError` (stable codes) for what they
cannot use; encoders build exactly the bytes or text the provider expects.
The matching leg in `gateway/legs/` owns the socket and the call's state.
"""
