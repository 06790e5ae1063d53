"""Latin words inside Russian text: known brands and terms as Russians say them, acronyms
spelled with English letter names ('SMS' -> 'эс эм эс'); other Latin words stay as
written (the speech model is multilingual and reads them as English)."""

from __future__ import annotations

import re

# Spoken forms as commonly heard in Russian speech (keys lowercase).
BRANDS_RU = {
    "iphone": "айфон",
    "ipad": "айпад",
    "macbook": "макбук",
    "mac": "мак",
    "apple": "эппл",
    "whatsapp": "ватсап",
    "telegram": "телеграм",
    "viber": "вайбер",
    "youtube": "ютуб",
    "google": "гугл",
    "yandex": "яндекс",
    "microsoft": "майкрософт",
    "windows": "виндоус",
    "android": "андроид",
    "samsung": "самсунг",
    "ozon": "озон",
    "wildberries": "вайлдберриз",
    "aliexpress": "алиэкспресс",
    "wi-fi": "вай-фай",
    "wifi": "вай-фай",
    "ok": "окей",
    "okay": "окей",
    "email": "имейл",
    "e-mail": "имейл",
    "online": "онлайн",
    "offline": "офлайн",
    "pdf": "пэ дэ эф",
    "bluetooth": "блютуз",
    "zoom": "зум",
    "skype": "скайп",
    "instagram": "инстаграм",
    "facebook": "фейсбук",
    "tiktok": "тикток",
    "vk": "вэ ка",
    "chatgpt": "чат джи пи ти",
    "openai": "оупен эй ай",
    "it": "ай ти",
    "excel": "эксель",
    "visa": "виза",
    "mastercard": "мастеркард",
    "uber": "убер",
    "netflix": "нетфликс",
    "amazon": "амазон",
    "tesla": "тесла",
    "bmw": "бэ эм вэ",
    "ikea": "икеа",
    "sim": "сим",
    "qr": "кью ар",
    "gps": "джи пи эс",
    "mail": "мейл",
    "gmail": "джимейл",
    "linux": "линукс",
    "iso": "исо",
    "nfc": "эн эф си",
    "usb": "ю эс би",
    "app store": "эп стор",
    "appstore": "эп стор",
    "google play": "гугл плей",
    "play market": "плей маркет",
    "apple pay": "эпл пэй",
    "google pay": "гугл пэй",
    "samsung pay": "самсунг пэй",
    "mir pay": "мир пэй",
}
LETTERS_EN_RU = {
    "A": "эй",
    "B": "би",
    "C": "си",
    "D": "ди",
    "E": "и",
    "F": "эф",
    "G": "джи",
    "H": "эйч",
    "I": "ай",
    "J": "джей",
    "K": "кей",
    "L": "эл",
    "M": "эм",
    "N": "эн",
    "O": "оу",
    "P": "пи",
    "Q": "кью",
    "R": "ар",
    "S": "эс",
    "T": "ти",
    "U": "ю",
    "V": "ви",
    "W": "дабл ю",
    "X": "экс",
    "Y": "уай",
    "Z": "зед",
}
_BRAND_RE = re.compile(
    r"(?<![A-Za-z\-])(" + "|".join(re.escape(k) for k in sorted(BRANDS_RU, key=len, reverse=True)) + r")(?![A-Za-z])",
    re.IGNORECASE,
)
_ACRONYM_RE = re.compile(r"(?<![A-Za-z'])([A-Z]{1,6})(?![A-Za-z'])")  # SMS, 5G, витамин C


def spell_en_letters(word: str) -> str:
    return " ".join(LETTERS_EN_RU[ch] for ch in word.upper() if ch in LETTERS_EN_RU)


def latin_in_russian(text: str) -> str:
    text = _BRAND_RE.sub(lambda m: BRANDS_RU[m.group(1).lower()], text)
    return _ACRONYM_RE.sub(lambda m: spell_en_letters(m.group(1)), text)
