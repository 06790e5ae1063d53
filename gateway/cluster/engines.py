"""The engine registry in the call plane: `voxgate engine` processes register themselves in Redis with a TTL
and their load, and gateways with `engine.kind: remote` and no `engine.endpoints` find them there.

    engine:{id}   hash    endpoint, engine (kind), active, queued, draining, pid   PX cluster.claim_ttl_s
    engines       zset    id -> expiry (ms)                                       members past it are dead

An engine re-registers every `claim_ttl_s / 3`; a killed one drops out within the TTL, and gateways close
their link to it. A draining engine stays listed (its own load reports say `draining`, so no new stream
goes there) until it exits and deletes its entry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Awaitable, Callable

from gateway.cluster.plane import refusing_start
from gateway.config import Config

log = logging.getLogger("voxgate.cluster")


def _client(config: Config):
    import redis.asyncio as aioredis

    cc = config.cluster
    password = os.environ.get(cc.password_env) if cc.password_env else None
    return aioredis.Redis.from_url(cc.redis_url, password=password, socket_timeout=1.0, socket_connect_timeout=1.0)


class EngineRegistration:
    """The engine's side: keep `engine:{id}` alive with this engine's endpoint and load."""

    def __init__(self, config: Config, engine_id: str, endpoint: str, load: Callable[[], dict]):
        self.config, self.engine_id, self.endpoint, self.load = config, engine_id, endpoint, load
        self.prefix = config.cluster.key_prefix
        self.ttl_ms = int(config.cluster.claim_ttl_s * 1000)
        self._redis = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._redis = _client(self.config)
        async with refusing_start(self._redis, self.config.cluster.redis_url, self.config.cluster.password_env):
            await self._beat()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="engine-registration")
        log.info("engine %s registered at %s as %s", self.engine_id, self.config.cluster.redis_url, self.endpoint)

    async def _beat(self) -> None:
        load = self.load()
        key = self.prefix + "engine:" + self.engine_id
        pipe = self._redis.pipeline(transaction=False)
        pipe.hset(key, mapping={"endpoint": self.endpoint, "pid": os.getpid(), **{k: str(v) for k, v in load.items()}})
        pipe.pexpire(key, self.ttl_ms)
        pipe.zadd(self.prefix + "engines", {self.engine_id: int(time.time() * 1000) + self.ttl_ms})
        await pipe.execute()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                await self._beat()
            except Exception as exc:
                log.warning(
                    "engine registration: Redis failed (%s); gateways keep their link, new ones find us when it is back",
                    exc,
                )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._redis is not None:
            try:
                await self._redis.delete(self.prefix + "engine:" + self.engine_id)
                await self._redis.zrem(self.prefix + "engines", self.engine_id)
            except Exception:
                log.debug("engine registration: leaving failed", exc_info=True)
            await self._redis.aclose()


class EngineDirectory:
    """The gateway's side: every `claim_ttl_s / 3` read the live engines and hand their endpoints on."""

    def __init__(self, config: Config, apply: Callable[[list[str]], Awaitable[None]]):
        self.config, self.apply = config, apply
        self.prefix = config.cluster.key_prefix
        self.period = config.cluster.claim_ttl_s / 3
        self._redis = None
        self._task: asyncio.Task | None = None
        self.endpoints: list[str] = []

    async def start(self) -> None:
        self._redis = _client(self.config)
        async with refusing_start(self._redis, self.config.cluster.redis_url, self.config.cluster.password_env):
            await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="engine-directory")

    async def refresh(self) -> None:
        now = int(time.time() * 1000)
        ids = [i.decode() for i in await self._redis.zrangebyscore(self.prefix + "engines", now, "+inf")]
        found = []
        for engine_id in ids:
            endpoint = await self._redis.hget(self.prefix + "engine:" + engine_id, "endpoint")
            if endpoint:
                found.append(endpoint.decode())
        found = sorted(set(found))
        if found != self.endpoints:
            self.endpoints = found
            await self.apply(found)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.refresh()
            except Exception as exc:  # Redis trouble: keep the engines we have
                log.info("engine directory: Redis failed (%s); keeping %d engines", exc, len(self.endpoints))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._redis is not None:
            await self._redis.aclose()
