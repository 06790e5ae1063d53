"""The gateway's locks, as pure logic (no sockets, no web framework): who may connect, how often, with what.

`peers` (per-IP caps, rate, address lists, the client address behind trusted proxies), `tokens` (short-lived
single-use session tokens for browsers), `turn` (TURN REST credentials). The doors that use them: the HTTP
middleware `gateway/http/guard.py`, `gateway/legs/accept.py` (auth) and the AudioSocket server.
"""
