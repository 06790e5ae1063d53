"""Pure wire formats: one module per provider, encode/decode only (no sockets, no asyncio)."""
