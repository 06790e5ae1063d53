"""Text frontend cost and normaliser comparison.

    .venv/bin/python bench/frontend_bench.py                 # per-sentence cost: median / p99 (ms)
    .venv/bin/python bench/frontend_bench.py --compare       # share of the case table each option passes

Cost: each sentence of a realistic agent set (ru and en, with numbers, dates, money) goes
through `tts.frontend.prepare_text` once per round after a warm-up (model loads are
reported apart); the median and p99 are over all sentence calls.

Compare: the case table (tests/frontend/cases.tsv) through each normaliser option —
num2words alone (digits to nominative words), ru-normalizr (safe and tts presets, when
installed: pip install -e .[frontend-bench]), voxgate's rules with and without pymorphy3
— scored after the same canonical folding the test uses.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = ROOT / "tests" / "frontend" / "cases.tsv"

SENTENCES_RU = [
    "Здравствуйте, меня зовут Анна, я помогу вам оформить заказ.",
    "Ваш заказ номер 48213 будет доставлен 5 марта с 10:00 до 14:00.",
    "Стоимость доставки составит 350 руб., а общая сумма заказа — 4 999 ₽.",
    "Сейчас действует скидка 15% на все товары, кроме электроники.",
    "Если удобно, курьер позвонит вам за 30 минут до приезда.",
    "Наш офис находится по адресу: ул. Ленина, д. 5, кв. 12, г. Москва.",
    "Позвоните нам по телефону +7 (495) 123-45-67, мы работаем круглосуточно.",
    "Замок на двери можно заменить в течение 2-3 дней.",
    "В 2024 году мы открыли 21 новый пункт выдачи в 12 городах.",
    "Оплатить можно картой, через СБП или наличными при получении.",
    "Гарантия на iPhone составляет 1 год с момента покупки.",
    "Температура на складе поддерживается от +2 до +8 °C.",
    "Посылка весит 2,5 кг, её габариты 30 на 40 см.",
    "Я готов ответить на ваши вопросы о тарифах, т.е. о ценах и условиях.",
    "Бонусы начисляются в размере 3,5% от суммы покупки, но не более 1000 баллов.",
    "Спасибо за звонок, всего доброго!",
]
SENTENCES_EN = [
    "Hi, my name is Anna, and I will help you place your order today.",
    "Your order number 48213 will arrive on March 5 between 10:00 and 14:00.",
    "Delivery costs $3.50, and the total comes to $1,299.99.",
    "There is a 15% discount on everything except electronics.",
    "The courier will call you about 30 minutes before arrival.",
    "Our office is at 221 Baker St. in London, next to Dr. Watson's clinic.",
    "Please call us at +1 (555) 123-4567, we are open 24 hours a day.",
    "The lock can be replaced within 2-3 days.",
    "In 2024 we opened 21 new pickup points in 12 cities.",
    "You can pay by card, e.g. Visa or Mastercard, or in cash.",
    "The warranty on the phone is 1 year from the date of purchase.",
    "The warehouse is kept between 2 and 8 °C.",
    "The parcel weighs 2.5 kg and measures 30 by 40 cm.",
    "I am ready to answer your questions about plans, i.e. prices and terms.",
    "Bonus points are 3.5% of the purchase, but no more than 1,000 points.",
    "Thank you for calling, have a nice day!",
]


# ------------------------------------------------------------------ cost
def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def measure_cost(rounds: int) -> list[dict]:
    from tts.frontend import FrontendOptions, prepare_text

    rows = []
    setups = [
        ("ru", "normalise", SENTENCES_RU, FrontendOptions()),
        ("ru", "normalise + stress", SENTENCES_RU, FrontendOptions(stress=True)),
        (
            "ru",
            "normalise + stress, no homographs",
            SENTENCES_RU,
            FrontendOptions(stress=True, stress_homographs=False),
        ),
        ("en", "normalise", SENTENCES_EN, FrontendOptions()),
    ]
    from tts.frontend import stress

    for lang, what, sentences, options in setups:
        stress._stressed.cache_clear()  # measure the model, not the phrase cache
        t0 = time.perf_counter()
        prepare_text(sentences[0], "auto", options)  # loads num2words / pymorphy3 / silero-stress once
        first_ms = (time.perf_counter() - t0) * 1000
        for s in sentences:  # warm caches
            prepare_text(s, "auto", options)
        times, cpu = [], []
        for _ in range(rounds):
            for s in sentences:
                stress._stressed.cache_clear()
                t, c = time.perf_counter(), time.process_time()
                prepare_text(s, "auto", options)
                times.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
        rows.append(
            {
                "lang": lang,
                "what": what,
                "calls": len(times),
                "first_call_ms": first_ms,
                "median_ms": statistics.median(times),
                "p99_ms": _percentile(times, 0.99),
                "max_ms": max(times),
                "cpu_median_ms": statistics.median(cpu),
                "cpu_p99_ms": _percentile(cpu, 0.99),
                "mean_chars": sum(map(len, sentences)) / len(sentences),
            }
        )
    return rows


def measure_chunker(rounds: int) -> dict:
    """Cost of Chunker.push per LLM-sized token (1-4 characters), over the same sentences as one turn."""
    from gateway.core.chunker import Chunker

    text = " ".join(SENTENCES_RU + SENTENCES_EN)
    tokens = re.findall(r"\s*\S{1,4}", text)
    times, chunks = [], 0
    for _ in range(rounds):
        c = Chunker()
        for tok in tokens:
            t = time.perf_counter()
            chunks += len(c.push(tok))
            times.append((time.perf_counter() - t) * 1e6)
        chunks += len(c.flush())
    return {
        "pushes": len(times),
        "median_us": statistics.median(times),
        "p99_us": _percentile(times, 0.99),
        "chunks_per_turn": chunks / rounds,
    }


# ------------------------------------------------------------------ compare
def load_cases(path: Path = CASES) -> list[tuple[str, str, str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#") and not line.startswith("lang\t"):
            rows.append(tuple(line.split("\t")))
    return rows


def canon(s: str) -> str:
    s = s.lower().replace("ё", "е")
    return " ".join(re.sub(r"[^\w+]+|_", " ", s).split())


def _num2words_only(lang: str) -> Callable[[str], str]:
    from num2words import num2words

    def run(text: str) -> str:
        text = re.sub(r"(\d)[ ,](?=\d{3}\b)", r"\1", text)
        return re.sub(r"\d+", lambda m: num2words(int(m.group(0)), lang=lang), text)

    return run


def _ru_normalizr(mode: str) -> Callable[[str], str] | None:
    try:
        from ru_normalizr import NormalizeOptions, Normalizer
    except ImportError:
        return None
    normalizer = Normalizer(NormalizeOptions.tts() if mode == "tts" else NormalizeOptions.safe())
    return normalizer.normalize


def _voxgate(lang: str, morphology: bool = True) -> Callable[[str], str]:
    from tts.frontend import normalize
    from tts.frontend import ru_words

    def clear_caches() -> None:  # every memo that may hold an answer made with or without pymorphy3
        for name in dir(ru_words):
            fn = getattr(ru_words, name)
            if callable(fn) and hasattr(fn, "cache_clear") and name != "morph":
                fn.cache_clear()

    def run(text: str) -> str:
        if morphology:
            return normalize(text, lang)
        saved = ru_words.morph
        ru_words.morph = lambda: None
        clear_caches()
        try:
            return normalize(text, lang)
        finally:
            ru_words.morph = saved
            clear_caches()

    return run


def _voxgate_then_ru_normalizr() -> Callable[[str], str] | None:
    rn = _ru_normalizr("safe")
    if rn is None:
        return None
    own = _voxgate("ru")
    return lambda text: rn(own(text))


def compare(show_failures: bool, path: Path = CASES) -> list[dict]:
    cases = load_cases(path)
    options = {
        "ru": [
            ("num2words only", _num2words_only("ru")),
            ("ru-normalizr 1.3 safe", _ru_normalizr("safe")),
            ("ru-normalizr 1.3 tts", _ru_normalizr("tts")),
            ("voxgate rules, no pymorphy3", _voxgate("ru", morphology=False)),
            ("voxgate rules (chosen)", _voxgate("ru")),
            ("voxgate rules, then ru-normalizr", _voxgate_then_ru_normalizr()),
        ],
        "en": [
            ("num2words only", _num2words_only("en")),
            ("voxgate rules (chosen)", _voxgate("en")),
        ],
    }
    rows = []
    for lang, opts in options.items():
        lang_cases = [c for c in cases if c[0] == lang]
        for name, fn in opts:
            if fn is None:
                rows.append({"lang": lang, "option": name, "passed": None, "total": len(lang_cases)})
                continue
            by_cat: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            passed, failures, t0 = 0, [], time.perf_counter()
            for _, cat, text, expected in lang_cases:
                try:
                    out = fn(text)
                except Exception as e:  # an option that crashes on a case fails that case
                    out = f"<{type(e).__name__}: {e}>"
                ok = canon(out) == canon(expected)
                passed += ok
                by_cat[cat][0] += ok
                by_cat[cat][1] += 1
                if not ok:
                    failures.append((text, out, expected))
            ms = (time.perf_counter() - t0) * 1000 / len(lang_cases)
            rows.append(
                {
                    "lang": lang,
                    "option": name,
                    "passed": passed,
                    "total": len(lang_cases),
                    "ms_per_case": ms,
                    "by_category": dict(by_cat),
                    "failures": failures,
                }
            )
            if show_failures and failures:
                print(f"--- {lang} / {name}: {len(failures)} failures")
                for text, out, expected in failures:
                    print(f"  {text!r}\n     got: {out}\n     exp: {expected}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", action="store_true", help="score normaliser options on the case table")
    p.add_argument("--failures", action="store_true", help="with --compare: print each failed case")
    p.add_argument("--cases", type=Path, default=CASES, help="with --compare: the case table (TSV)")
    p.add_argument("--rounds", type=int, default=20, help="cost: passes over the sentence set")
    p.add_argument("--threads", type=int, default=0, help="cost: torch intra-op threads (0: leave as is)")
    args = p.parse_args(argv)
    if args.compare:
        rows = compare(args.failures, args.cases)
        print(f"{'lang':4} {'option':34} {'passed':>9} {'share':>7} {'ms/case':>8}")
        for r in rows:
            if r["passed"] is None:
                print(f"{r['lang']:4} {r['option']:34} {'not installed':>17}")
                continue
            print(
                f"{r['lang']:4} {r['option']:34} {r['passed']:>4}/{r['total']:<4} {r['passed'] / r['total']:>7.1%}"
                f" {r['ms_per_case']:>8.2f}"
            )
        cats = sorted({c for r in rows if r.get("by_category") for c in r["by_category"]})
        print("\nby category (passed/total):")
        for r in rows:
            if r.get("by_category"):
                cells = " ".join(
                    f"{c}={r['by_category'][c][0]}/{r['by_category'][c][1]}" for c in cats if c in r["by_category"]
                )
                print(f"  {r['lang']} {r['option']}: {cells}")
        return 0
    import os

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}, load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    rows = measure_cost(args.rounds)
    print(
        f"{'lang':4} {'what':34} {'calls':>6} {'median ms':>10} {'p99 ms':>8} {'max ms':>8} "
        f"{'cpu med ms':>10} {'cpu p99 ms':>10} {'first call ms':>14}"
    )
    for r in rows:
        print(
            f"{r['lang']:4} {r['what']:34} {r['calls']:>6} {r['median_ms']:>10.2f} {r['p99_ms']:>8.2f}"
            f" {r['max_ms']:>8.2f} {r['cpu_median_ms']:>10.2f} {r['cpu_p99_ms']:>10.2f} {r['first_call_ms']:>14.0f}"
        )
    ch = measure_chunker(args.rounds)
    print(
        f"chunker: {ch['pushes']} pushes of 1-4 characters, median {ch['median_us']:.1f} us, "
        f"p99 {ch['p99_us']:.1f} us, {ch['chunks_per_turn']:.0f} chunks per turn"
    )
    print(f"torch threads after: {torch.get_num_threads()}, load average: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
