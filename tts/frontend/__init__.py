"""Text frontend: normalisation to spoken words (ru, en), language pick by script, Russian stress.

Interface used by the gateway: `prepare_text(text, language, options) -> PreparedText`.
This placeholder passes text through; the frontend issue replaces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CYRILLIC = re.compile(r"[\u0400-\u04FF]")


@dataclass(frozen=True)
class FrontendOptions:
    normalize: bool = True
    stress: bool = False
    stress_format: str = "plus"  # plus | acute
    lexicon: dict = field(default_factory=dict)  # language -> {word: spoken form}


@dataclass(frozen=True)
class PreparedText:
    text: str  # what the engine speaks
    language: str  # resolved language code (ru, en, …)


def detect_language(text: str) -> str:
    return "ru" if _CYRILLIC.search(text) else "en"


def prepare_text(text: str, language: str = "auto", options: FrontendOptions = FrontendOptions()) -> PreparedText:
    lang = detect_language(text) if language == "auto" else language
    return PreparedText(text=text, language=lang)
