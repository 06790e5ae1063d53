"""How far the estimated word times are from the eSpeak engine's exact ones (docs/concepts.md, "Word timings").

    python -m bench.word_timing_error [--text FILE]

Each sentence is one text chunk, prepared as the gateway prepares it (normalised), spoken by the eSpeak NG demo
voice. The exact word ends are the engine's own (its word and pause-phoneme events); the estimate is what the
gateway uses for an engine without timings: each word's share of the chunk's letters, over the chunk's speech
(its trailing silence left out). Printed: mean and worst absolute error of the word ends, per language and in
all, and the same for the older estimate over the whole chunk (the pause after a sentence included).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import numpy as np

from gateway.core.playback import SpokenChunk
from gateway.core.session import SILENCE_LEVEL
from tts import SAMPLE_RATE, SynthesisRequest
from tts.espeak_engine import EspeakEngine
from tts.frontend import FrontendOptions, prepare_text

SENTENCES = [
    "Hello, thank you for calling the clinic.",
    "Your appointment is on Tuesday, March 3rd, at 10:30 am.",
    "The total comes to $42.50, including 20% tax.",
    "Dr. Smith will call you back within 24 hours.",
    "Please hold while I transfer you to the billing department.",
    "Your order number is 7 4 1 9, shipped via UPS.",
    "We open at 9 am and close at 6 pm, Monday to Friday.",
    "The flight from NYC to LA takes about 6 hours.",
    "I'm sorry, I didn't catch that; could you repeat it?",
    "Mr. Johnson's account shows a balance of 1,250 dollars.",
    "The temperature tomorrow will be 18 degrees, with light rain.",
    "Press 1 for sales, 2 for support, or stay on the line.",
    "It is 3.5 km from the station, roughly a 40-minute walk.",
    "Thanks again, and have a wonderful evening!",
    "Our reference is ABC-123, issued on 12/05/2024.",
    "Здравствуйте, спасибо, что позвонили в клинику.",
    "Ваша запись на вторник, 3 марта, в 10:30.",
    "Итого к оплате 1 250 рублей, включая НДС 20%.",
    "Доктор Иванова перезвонит вам в течение 24 часов.",
    "Пожалуйста, оставайтесь на линии, я переведу вас в бухгалтерию.",
    "Номер вашего заказа 7419, доставка через СДЭК.",
    "Мы работаем с 9 до 18 часов, с понедельника по пятницу.",
    "От вокзала до офиса примерно 3,5 км, т. е. 40 минут пешком.",
    "Извините, я не расслышала; повторите, пожалуйста.",
    "На счёте г-на Петрова 15 000 рублей.",
    "Завтра будет +18 градусов и небольшой дождь.",
    "Нажмите 1 для отдела продаж или 2 для поддержки.",
    "Спасибо ещё раз и хорошего вечера!",
    "Ваш номер обращения АБВ-123 от 12.05.2024.",
    "В 2024 году мы обслужили более 3 млн клиентов.",
]


def language(text: str) -> str:
    return "ru" if any("\u0400" <= ch <= "\u04ff" for ch in text) else "en"


def word_ends(chunk: SpokenChunk) -> list[float]:
    return [w["end_ms"] for w in chunk.take_words(0, SAMPLE_RATE)]


async def measure(sentences: list[str]) -> dict[str, dict[str, list[float]]]:
    engine = EspeakEngine()
    await engine.start()
    errors: dict[str, dict[str, list[float]]] = {}
    try:
        for text in sentences:
            lang = language(text)
            prepared = prepare_text(text, lang, FrontendOptions(normalize=True))
            chunks = [c async for c in engine.synthesize(SynthesisRequest(text=prepared.text, language=lang))]
            pcm = np.concatenate([c.pcm for c in chunks])
            loud = np.flatnonzero(np.abs(pcm) > SILENCE_LEVEL)
            speech = int(loud[-1]) + 1 if len(loud) else len(pcm)

            def chunk(timed: bool, audio: int) -> SpokenChunk:
                c = SpokenChunk.build(text, prepared.normalized or prepared.text).with_engine_text(prepared.text)
                if timed:
                    for piece in chunks:
                        if piece.words is not None:
                            c.add_timings(piece.words, 1.0)
                c.finish(audio)
                return c

            exact = word_ends(chunk(True, speech))
            for name, audio in (("estimate", speech), ("estimate over the whole chunk", len(pcm))):
                guess = word_ends(chunk(False, audio))
                assert len(guess) == len(exact), (text, guess, exact)
                per = errors.setdefault(name, {})
                per.setdefault(lang, []).extend(abs(g - e) for g, e in zip(guess, exact))
    finally:
        await engine.close()
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", help="a file of sentences, one a line (default: the built-in ru + en set)")
    args = parser.parse_args()
    sentences = SENTENCES
    if args.text:
        with open(args.text, encoding="utf-8") as f:
            sentences = [line.strip() for line in f if line.strip()]
    errors = asyncio.run(measure(sentences))
    print(f"{len(sentences)} sentences, eSpeak NG, word-end error of the estimate vs the engine's exact times (ms)")
    print(f"{'estimate':32} {'lang':5} {'words':>5} {'mean':>7} {'worst':>7}")
    for name, per in errors.items():
        for lang, errs in [*sorted(per.items()), ("all", [e for v in per.values() for e in v])]:
            print(f"{name:32} {lang:5} {len(errs):5d} {statistics.fmean(errs):7.1f} {max(errs):7.1f}")


if __name__ == "__main__":
    main()
