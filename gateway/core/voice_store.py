"""Cloned voices of a running gateway: the config's (`voices.NAME.ref_audio`) and the uploaded ones.

Uploaded voices (`POST /v1/voices`) persist in `server.voices_dir`, one folder per voice
(the recording as uploaded, `ref.wav`, `ref.mp3`, … + `voice.json`), and come back on the next start. Every voice is
registered with the engine through tts's public face (`Engine.add_voice`), which caches the
prompt parts per recording and checkpoint, and joins `config.voices`, so `session.start`
takes it by name on every leg. A reference is checked here (decodes, 1-30 s, not silent)
before the engine sees it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import time

from audio.reference import ReferenceAudioError, load_reference
from audio.reference_formats import file_extension
from gateway.cluster.plane import ClusterUnavailable
from gateway.config import Config, VoiceConfig
from tts import Engine, EngineError, VoiceClone

log = logging.getLogger("voxgate.voices")

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_LANGUAGE = re.compile(r"auto|[a-z]{2}")


class VoiceError(Exception):
    """A voice request that cannot be served: stable `code`, HTTP `status`."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class VoiceStore:
    def __init__(self, config: Config, engine: Engine):
        self.config = config
        self.engine = engine
        self.dir = config.server.voices_dir
        self.uploaded: set[str] = set()
        self._lock = asyncio.Lock()
        self.plane = None  # the call plane (cluster.redis_url): uploads are kept in Redis, shared by every node

    # ------------------------------------------------------------ start
    async def start(self) -> None:
        """Register the config's cloned voices, then the persisted uploads; a bad config voice refuses the start."""
        for name, voice in self.config.voices.items():
            if voice.ref_audio:
                try:
                    with open(voice.ref_audio, "rb") as f:
                        data = f.read()
                    await self.engine.add_voice(VoiceClone(name, data, voice.ref_text, voice.x_vector_only))
                except (OSError, EngineError) as exc:
                    why = getattr(exc, "message", None) or str(exc)
                    raise ValueError(f"{self.config.source}: voices.{name}: {why}") from exc
        if self.dir:
            try:
                os.makedirs(self.dir, exist_ok=True)
            except OSError as exc:
                raise ValueError(
                    f"{self.config.source}: server.voices_dir: cannot create {self.dir!r}: {exc.strerror}"
                ) from exc
            for name in sorted(os.listdir(self.dir)):
                folder = os.path.join(self.dir, name)
                if not os.path.isfile(os.path.join(folder, "voice.json")):
                    continue
                try:
                    await self._restore(name, folder)
                except Exception as exc:  # noqa: BLE001 - one damaged voice folder never stops the gateway
                    log.error("uploaded voice %r in %s not restored: %s", name, folder, getattr(exc, "message", exc))

    async def _restore(self, name: str, folder: str) -> None:
        with open(os.path.join(folder, "voice.json"), encoding="utf-8") as f:
            meta = json.load(f)
        if name in self.config.voices:
            log.warning("uploaded voice %r is shadowed by the config's voice of that name", name)
            return
        ref = os.path.join(
            folder, os.path.basename(meta.get("ref_file") or "ref.wav")
        )  # uploads before formats: ref.wav
        with open(ref, "rb") as f:
            data = f.read()
        await self.engine.add_voice(VoiceClone(name, data, meta.get("ref_text"), bool(meta.get("x_vector_only"))))
        self.config.voices[name] = self._voice_config(ref, meta)
        self.uploaded.add(name)
        log.info("uploaded voice %r restored from %s", name, folder)

    @staticmethod
    def _voice_config(ref: str, meta: dict) -> VoiceConfig:
        return VoiceConfig(
            ref_audio=ref,
            ref_text=meta.get("ref_text"),
            x_vector_only=bool(meta.get("x_vector_only")),
            language=meta.get("language") or "auto",
        )

    # ------------------------------------------------------------ what the HTTP routes call
    async def add(
        self, name: str, audio: bytes, ref_text: str | None, x_vector_only: bool, language: str = "auto"
    ) -> dict:
        if not NAME.fullmatch(name or ""):
            raise VoiceError(
                "bad_message", "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        if not _LANGUAGE.fullmatch(language):
            raise VoiceError("bad_message", f"language must be 'auto' or an ISO 639-1 code, not {language!r}")
        ref_text = (ref_text or "").strip() or None
        if not x_vector_only and not ref_text:
            raise VoiceError(
                "bad_voice",
                "ref_text (the recording's transcript) is required for in-context cloning; or set x_vector_only=true",
            )
        try:
            ref = load_reference(audio)  # checked here: a bad recording never reaches the engine
        except ReferenceAudioError as exc:
            raise VoiceError("bad_audio", exc.message) from None
        async with self._lock:
            if name in self.config.voices or name.lower() in self._aliases():
                raise VoiceError(
                    "voice_exists",
                    f"voice {name!r} already exists; DELETE /v1/voices/{name} first"
                    if name in self.uploaded
                    else f"voice {name!r} is configured and cannot be replaced",
                    409,
                )
            if not self.engine.can_clone:
                raise VoiceError(
                    "unsupported_voice",
                    f"the {self.engine.name} engine cannot clone voices (it needs a Qwen3-TTS Base checkpoint)",
                    422,
                )
            t0 = time.perf_counter()
            try:
                info = await self.engine.add_voice(VoiceClone(name, audio, ref_text, x_vector_only))
            except EngineError as exc:
                raise VoiceError(exc.code, exc.message, 422 if exc.code == "unsupported_voice" else 400) from None
            meta = {
                "ref_text": ref_text,
                "x_vector_only": x_vector_only,
                "language": language,
                "created": time.time(),
                "ref_seconds": round(ref.duration_s, 3),
                "sha256": ref.sha256,
                "ref_file": "ref." + file_extension(audio),
            }
            if self.plane is not None:  # every node of the plane takes it from Redis (docs/cluster.md)
                try:
                    await self.plane.voice_put(name, {"wav": audio, "meta": json.dumps(meta)})
                except ClusterUnavailable as exc:
                    self.engine.remove_voice(name)
                    raise VoiceError(
                        "cluster_unavailable",
                        f"the voice could not be shared with the other nodes ({exc}); try again",
                        503,
                    ) from None
            path = self._persist(name, audio, meta)
            self.config.voices[name] = self._voice_config(path or "<memory>", meta)
            self.uploaded.add(name)
        log.info(
            "voice %r added (%s, %.1f s reference, prepared in %.0f ms)",
            name,
            info.get("kind"),
            ref.duration_s,
            (time.perf_counter() - t0) * 1000,
        )
        return {**self.describe(name), **{k: info[k] for k in ("ref_frames", "prepare_ms") if k in info}}

    def _persist(self, name: str, audio: bytes, meta: dict) -> str | None:
        if not self.dir:
            return None
        folder = os.path.join(self.dir, name)
        tmp = folder + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        meta["ref_file"] = "ref." + file_extension(audio)  # named by its bytes (a shared voice's meta may lack it)
        with open(os.path.join(tmp, meta["ref_file"]), "wb") as f:
            f.write(audio)
        with open(os.path.join(tmp, "voice.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=2)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)  # a crash leaves the old folder or the new one, never half of one
        return os.path.join(folder, meta["ref_file"])

    async def remove(self, name: str) -> None:
        async with self._lock:
            if name not in self.config.voices:
                raise VoiceError("unknown_voice", f"unknown voice {name!r}", 404)
            if name not in self.uploaded:
                raise VoiceError(
                    "voice_readonly", f"voice {name!r} comes from the config; edit the config to remove it", 409
                )
            if self.plane is not None:
                try:
                    await self.plane.voice_delete(name)
                except ClusterUnavailable as exc:
                    raise VoiceError(
                        "cluster_unavailable", f"the voice could not be deleted on every node ({exc}); try again", 503
                    ) from None
            self.engine.remove_voice(name)
            del self.config.voices[name]
            self.uploaded.discard(name)
            if self.dir:
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
        log.info("voice %r deleted", name)

    # ------------------------------------------------------------ the plane's shared uploads
    async def share_local(self) -> None:
        """On joining the plane: uploads this node kept on disk from before go to Redis (a voice there wins)."""
        await self.sync()

    async def _share(self, name: str) -> bool:
        """Put one of this node's uploads into the plane (False when its recording is not on this node's disk)."""
        v = self.config.voices[name]
        try:
            with open(v.ref_audio, "rb") as f:
                audio = f.read()
        except OSError:
            return False
        meta = {
            "ref_text": v.ref_text,
            "x_vector_only": v.x_vector_only,
            "language": v.language,
            "created": time.time(),
        }
        await self.plane.voice_put(name, {"wav": audio, "meta": json.dumps(meta)})
        log.info("voice %r shared with the plane", name)
        return True

    async def sync(self) -> None:
        """Make this node's uploaded voices the plane's: take those added on other nodes, drop those deleted there.
        Runs on every heartbeat and before `GET /v1/voices` answers."""
        shared = await self.plane.voice_names()
        async with self._lock:
            for name in sorted(shared - self.uploaded):
                if name in self.config.voices:
                    continue  # a configured voice of that name wins on this node
                fields = await self.plane.voice_get(name)
                if not fields or "wav" not in fields:
                    continue
                meta = json.loads(fields.get("meta") or b"{}")
                try:
                    await self.engine.add_voice(
                        VoiceClone(name, fields["wav"], meta.get("ref_text"), bool(meta.get("x_vector_only")))
                    )
                except EngineError as exc:
                    log.error("shared voice %r not usable here: %s", name, exc.message)
                    continue
                path = self._persist(name, fields["wav"], meta)
                self.config.voices[name] = self._voice_config(path or "<redis>", meta)
                self.uploaded.add(name)
                log.info("voice %r taken from the plane", name)
            for name in sorted(self.uploaded - shared):
                if not await self.plane.voice_deleted(name) and await self._share(name):
                    continue  # missing, not deleted (uploaded before the plane, or a Redis that lost its data): shared again
                self.engine.remove_voice(name)
                self.config.voices.pop(name, None)
                self.uploaded.discard(name)
                if self.dir:
                    shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
                log.info("voice %r deleted on another node", name)

    def _aliases(self) -> set[str]:
        return {a.lower() for v in self.config.voices.values() for a in v.aliases}

    def describe(self, name: str) -> dict:
        v = self.config.voices[name]
        out = {
            "name": name,
            "kind": v.kind,
            "source": "uploaded" if name in self.uploaded else "config",
            "language": v.language,
            "speaker": v.speaker,
            "instruct": v.instruct,
            "aliases": v.aliases,
        }
        if v.ref_audio:
            out.update(ref_text=v.ref_text, x_vector_only=v.x_vector_only)
        return out

    def listing(self) -> list[dict]:
        return [self.describe(name) for name in list(self.config.voices)]
