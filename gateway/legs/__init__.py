"""Legs: one thin adapter per way a call arrives, over the call core (`gateway.core.CallCore`).

Each module exposes `install(core, host)`: it registers its routes (or its
own server) on the host and its start/stop hooks. `gateway/app.py` lists the
installed legs; legs import the core and their wire format, never each other
or the app.
"""
