"""Text frontend: normalisation to spoken words (ru, en), language pick by script, Russian stress.

Interface used by the gateway: `prepare_text(text, language, options) -> PreparedText`,
called once per text chunk before synthesis. Order: lexicon (from config) first, then the
language's normaliser, then (Russian, when asked) stress marks and ё.

Everything heavy is imported lazily (pymorphy3, silero-stress), so `tts` still
imports with torch and numpy alone. With stress on, a chunk costs milliseconds (the
homograph model) and the first one seconds (loading it): from an event loop, await
`prepare_text_async`, which runs the model on its own thread.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field

from .cleanup import strip_markup

log = logging.getLogger("voxgate.frontend")
_CYRILLIC = re.compile(r"[\u0400-\u04FF]")
_SCRIPTS = (
    (re.compile(r"[\u3040-\u30ff]"), "ja"),  # kana before Han: Japanese text mixes both
    (re.compile(r"[\uac00-\ud7af]"), "ko"),
    (re.compile(r"[\u4e00-\u9fff]"), "zh"),
)
NORMALIZED_LANGUAGES = ("ru", "en")


@dataclass(frozen=True)
class FrontendOptions:
    normalize: bool = True
    stress: bool = False  # Russian only: stress marks and ё (silero-stress)
    stress_format: str = "plus"  # plus ('+' before the vowel) | acute (combining accent after it)
    lexicon: dict = field(default_factory=dict)  # language -> {word: spoken form}; "*" applies to all
    stress_single_vowel: bool = False  # also mark one-vowel words ("н+а")
    stress_homographs: bool = True  # context model for замок/готов/все: most of the stress cost


@dataclass(frozen=True)
class PreparedText:
    text: str  # what the engine speaks
    language: str  # resolved language code (ru, en, …)
    normalized: str = ""  # the spoken form before stress marks (for logs and played_text)


_LETTER = re.compile(r"[^\W\d_]")


def detect_language(text: str, default: str = "en") -> str:
    """Language by script: any Cyrillic -> ru (Russian text often carries Latin brand names);
    kana -> ja, Hangul -> ko, Han -> zh; other letters -> en; no letters at all ("7.",
    "10:30") -> `default` (a session may pass the language of the turn's previous chunk)."""
    if _CYRILLIC.search(text):
        return "ru"
    for pattern, lang in _SCRIPTS:
        if pattern.search(text):
            return lang
    return "en" if _LETTER.search(text) else default


def normalize(text: str, language: str) -> str:
    """Spoken form of `text` for a resolved language; other languages pass through."""
    if language == "ru":
        from .ru import normalize_ru

        return normalize_ru(text)
    if language == "en":
        from .en import normalize_en

        return normalize_en(text)
    return text


@functools.lru_cache(maxsize=64)
def _lexicon_pattern(items: tuple[tuple[str, str], ...]) -> tuple[re.Pattern, dict[str, str], dict[str, str]]:
    exact = {k: v for k, v in items}
    folded = {k.lower(): v for k, v in items if k == k.lower()}  # lowercase keys match any case
    keys = sorted(exact, key=len, reverse=True)
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(k) for k in keys) + r")(?!\w)", re.IGNORECASE)
    return pattern, exact, folded


def apply_lexicon(text: str, entries: dict[str, str]) -> str:
    """Replace whole words from the lexicon. A key in lowercase matches any case ('wifi', 'WiFi');
    a key with capitals matches exactly ('IT' but not 'it')."""
    if not entries:
        return text
    pattern, exact, folded = _lexicon_pattern(tuple(sorted(entries.items())))

    def sub(m: re.Match) -> str:
        w = m.group(1)
        if w in exact:
            return exact[w]
        return folded.get(w.lower(), w)

    return pattern.sub(sub, text)


def _spoken(text: str, language: str, options: FrontendOptions, fallback: str) -> tuple[str, str]:
    """(resolved language, spoken form before stress marks)."""
    lang = detect_language(text, fallback) if language == "auto" else language.lower().split("-")[0]  # "ru-RU"
    lexicon = options.lexicon or {}
    spoken = apply_lexicon(text, {**lexicon.get("*", {}), **lexicon.get(lang, {})})
    if options.normalize:
        try:
            spoken = normalize(strip_markup(spoken), lang)
        except Exception:  # a normaliser bug must not cost the caller the chunk: speak it as written
            log.exception("frontend: normalising %r (%s) failed; speaking it as written", text, lang)
    return lang, spoken


def prepare_text(
    text: str, language: str = "auto", options: FrontendOptions = FrontendOptions(), fallback_language: str = "en"
) -> PreparedText:
    """The spoken form of one text chunk. With language "auto", a chunk without letters
    takes `fallback_language` (pass the previous chunk's language: "7." after Russian)."""
    lang, spoken = _spoken(text, language, options, fallback_language)
    out = spoken
    if options.stress and lang == "ru":
        from .stress import add_stress

        out = add_stress(spoken, options.stress_format, options.stress_single_vowel, options.stress_homographs)
    return PreparedText(text=out, language=lang, normalized=spoken)


async def prepare_text_async(
    text: str, language: str = "auto", options: FrontendOptions = FrontendOptions(), fallback_language: str = "en"
) -> PreparedText:
    """`prepare_text` for the event loop: normalisation inline (well under a millisecond), Russian
    stress awaited from the stress worker thread (milliseconds per sentence, and 2-3 s for the
    first call, which loads the model), so the loop never blocks on the model."""
    lang, spoken = _spoken(text, language, options, fallback_language)
    out = spoken
    if options.stress and lang == "ru":
        import asyncio

        from .stress import submit_stress

        future = submit_stress(spoken, options.stress_format, options.stress_single_vowel, options.stress_homographs)
        out = await asyncio.wrap_future(future)
    return PreparedText(text=out, language=lang, normalized=spoken)
