"""Russian word stress and ё restoration with silero-stress (offline; weights ship in the wheel).

`import silero_stress` sets torch's intra-op thread count to 1 for the whole process, so the
model is loaded lazily, once per process, and the thread count is put back right after.

The model runs on one dedicated worker thread: calls are serialised there (the model is not
documented as thread-safe) and an event loop can await them (`submit_stress`).

Cost depends on torch's OpenMP threads: with more than one intra-op thread on a busy machine,
OpenMP's busy-waiting multiplies the cost (2-core dev box, load 4: median 15-20 ms CPU per
sentence, p99 80-400 ms). OMP_WAIT_POLICY=PASSIVE in the process environment, or one torch
thread, brings it to about 3 ms median and under 10 ms p99 (bench/frontend_bench.py).
"""

from __future__ import annotations

import concurrent.futures
import functools
import re
import threading

_VOWELS = "аеёиоуыэюяАЕЁИОУЫЭЮЯ"
_ACUTE = "\u0301"
_load_lock = threading.Lock()
_accentor = None
_worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="silero-stress")


def _load():
    global _accentor
    with _load_lock:
        if _accentor is None:
            import torch

            threads = torch.get_num_threads()
            interop = torch.get_num_interop_threads()
            try:
                from silero_stress import load_accentor

                _accentor = load_accentor("ru")
            finally:
                if torch.get_num_threads() != threads:
                    torch.set_num_threads(threads)
                if torch.get_num_interop_threads() != interop:  # silero does not touch it today
                    try:
                        torch.set_num_interop_threads(interop)
                    except RuntimeError:
                        pass  # can only be set before inter-op work starts
    return _accentor


def is_loaded() -> bool:
    return _accentor is not None


def warm_up() -> None:
    """Load the model now (about 2.5 s) instead of on the first stressed chunk."""
    add_stress("Замок готов.")


def add_stress(text: str, fmt: str = "plus", single_vowel: bool = False, homographs: bool = True) -> str:
    """Stress marks and ё for Russian text: '+' before the stressed vowel (fmt='plus') or a
    combining acute accent after it (fmt='acute'). Words with one vowel stay unmarked unless
    single_vowel. homographs=False skips the context model (замок, готов, все/всё): cheaper,
    but those words are left unmarked. A word that already has a '+' (from the lexicon:
    "Ваг+анов") keeps it: the lexicon can fix a stress the model gets wrong."""
    return submit_stress(text, fmt, single_vowel, homographs).result()


def submit_stress(
    text: str, fmt: str = "plus", single_vowel: bool = False, homographs: bool = True
) -> concurrent.futures.Future:
    """`add_stress` as a future from the stress worker (for `asyncio.wrap_future`)."""
    if fmt not in ("plus", "acute"):
        raise ValueError(f"stress format must be plus or acute, not {fmt!r}")
    return _worker.submit(_stressed, text, fmt, single_vowel, homographs)


@functools.lru_cache(maxsize=4096)
def _stressed(text: str, fmt: str, single_vowel: bool, homographs: bool) -> str:
    """Cached: agents repeat their phrases (greetings, confirmations, goodbyes)."""
    accentor = _load()
    flags = {} if homographs else {"put_stress_homo": False, "put_yo_homo": False}
    marked = accentor(text, stress_single_vowel=single_vowel, **flags)
    if fmt == "acute":
        marked = re.sub(rf"\+([{_VOWELS}])", lambda m: m.group(1) + _ACUTE, marked)
    return marked
