"""`voxgate normalize --lang auto|ru|en [--stress] TEXT`: print the spoken form of a text."""

from __future__ import annotations

import sys

from . import FrontendOptions, prepare_text


def normalize_main(args) -> int:
    text = args.text
    if not text.strip():
        print("error: empty_text: give a text to normalise", file=sys.stderr)
        return 2
    options = FrontendOptions(
        normalize=True, stress=bool(args.stress), stress_format=getattr(args, "stress_format", "plus")
    )
    prepared = prepare_text(text, args.lang, options)
    if args.stress and prepared.language != "ru":
        print(f"note: stress marks are for Russian only; language is {prepared.language}", file=sys.stderr)
    print(prepared.text)
    return 0
