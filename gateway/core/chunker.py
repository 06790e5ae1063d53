"""Sentence chunker for LLM token streams: pieces of any size in, text chunks out.

Interface used by the session: `Chunker(...)`, `push(piece) -> list[str]`,
`flush() -> list[str]` (end of turn).

Chunks are stripped of surrounding whitespace and never empty; joined with single
spaces they give back the input modulo whitespace. Cuts happen only at whitespace
(a single run of more than `max_chunk_chars` non-space characters is the one
exception), so tokens such as 3.5, 3,5, 10:30, т.е., U.S. or an ellipsis are never
split, and closing quotes and brackets stay with their sentence.

The chunker decides without lookahead it does not have: a sentence end is
confirmed only by the whitespace after it and the first letter or digit of the
next sentence (a lowercase letter means the period belonged to an abbreviation
or an ellipsis inside a sentence). Until then the text is held back; `flush`
releases it at the end of the turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\S+")
_CLOSERS = "\"'»”’)]}"
_OPENERS = "\"'«“‘([{"
_DASHES = frozenset({"—", "–", "-", "--"})
_CLAUSE_PUNCT = ",;:"
_NEXT_ALNUM = re.compile(r"[^\W_]")

# Abbreviations after which a sentence never ends (a name, a number or a word follows).
_NEVER_FINAL = frozenset(
    {
        # en
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "vs",
        "e.g",
        "i.e",
        "cf",
        "approx",
        "fig",
        "mt",
        "lt",
        "sgt",
        "rev",
        "pp",
        "vol",
        # ru
        "т",
        "т.е",
        "т.к",
        "т.н",
        "т.ч",
        "ул",
        "пр",
        "просп",
        "пер",
        "пл",
        "им",
        "см",
        "напр",
        "тел",
        "д",
        "кв",
        "корп",
        "стр",
        "обл",
        "р-н",
        "гр",
        "проф",
        "акад",
        "доц",
        "ср",
        "рис",
        "табл",
        "с",
        "ст",
        "зам",
        "нач",
        "пос",
        "дер",
    }
)
# Abbreviations that may end a sentence: cut only when an uppercase letter follows.
_MAYBE_FINAL = frozenset(
    {
        "etc",
        "inc",
        "ltd",
        "co",
        "corp",
        "jr",
        "ft",
        "a.m",
        "p.m",
        "u.s",
        "u.k",
        "u.s.a",
        "e.u",
        "т.д",
        "т.п",
        "д",
        "п",
        "др",
        "пр",
        "руб",
        "коп",
        "тыс",
        "млн",
        "млрд",
        "трлн",
        "гг",
        "вв",
        "в",
        "г",
        "мин",
        "сек",
        "ч",
        "кг",
        "км",
        "см",
        "мм",
        "л",
        "шт",
        "ед",
        "н.э",
        "до н.э",
    }
)
# Words a fast first chunk must not end on: the next word belongs to them.
_FUNCTION_WORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "and",
        "or",
        "but",
        "as",
        "is",
        "are",
        "was",
        "be",
        "my",
        "your",
        "our",
        "their",
        "his",
        "her",
        "its",
        "this",
        "that",
        "и",
        "а",
        "но",
        "или",
        "в",
        "во",
        "на",
        "с",
        "со",
        "к",
        "ко",
        "у",
        "о",
        "об",
        "от",
        "до",
        "по",
        "за",
        "из",
        "под",
        "над",
        "при",
        "про",
        "для",
        "без",
        "через",
        "не",
        "ни",
        "что",
        "как",
        "чтобы",
        "это",
        "мой",
        "ваш",
        "наш",
        "их",
        "его",
        "её",
        "ее",
    }
)


@dataclass(frozen=True)
class _Gap:
    start: int  # end of the token before the whitespace
    end: int  # start of the next token (or end of buffer)


def _core(token: str) -> str:
    """The token without the closing quotes and brackets that follow its punctuation."""
    return token.rstrip(_CLOSERS)


def _has_closer(token: str) -> bool:
    return len(token) > len(_core(token))


def _is_number(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


def _abbr_word(core: str) -> str:
    """'Т.е.' -> 'т.е', '(см.' -> 'см'."""
    return core[:-1].lstrip(_OPENERS).lower()


def _is_initial(core: str) -> bool:
    """'J.', 'А.': a capital letter and a period (the word before it is lowercased elsewhere)."""
    word = core[:-1].lstrip(_OPENERS)
    return len(word) == 1 and word.isalpha() and word.isupper()


class Chunker:
    """Splits one turn's streamed text into chunks for synthesis.

    * sentence ends cut (after abbreviations only when an uppercase letter follows);
    * the first chunk of a turn may go out early, at the first clause break
      (, ; : or a dash) or once `first_chunk_words` words have arrived
      (0 disables this); it needs at least `min_first_chars` characters, even
      at a sentence end (a lone "Yes." plays out before the next chunk is ready);
    * a chunk longer than `max_chunk_chars` is cut at its last clause break,
      else at its last word boundary that does not separate a protected pair;
    * a sentence or clause cut that would leave a chunk shorter than
      `min_chunk_chars` waits for more text instead.
    """

    def __init__(
        self,
        first_chunk_words: int = 6,
        max_chunk_chars: int = 250,
        min_chunk_chars: int = 1,
        *,
        min_first_chars: int = 10,
    ):
        if first_chunk_words < 0 or max_chunk_chars < 1 or min_chunk_chars < 1 or min_first_chars < 0:
            raise ValueError("first_chunk_words >= 0, max_chunk_chars >= 1, min_chunk_chars >= 1, min_first_chars >= 0")
        self.first_chunk_words = first_chunk_words
        self.max_chunk_chars = max_chunk_chars
        self.min_chunk_chars = min_chunk_chars
        # a fast first chunk shorter than this ("Hi,") would play out before the next one is ready
        self.min_first_chars = min_first_chars
        self._buf = ""
        self._emitted = 0

    @property
    def pending(self) -> str:
        """Text received but not yet released as a chunk."""
        return self._buf

    def push(self, piece: str) -> list[str]:
        self._buf += piece
        out: list[str] = []
        while True:
            cut = self._find_cut()
            if cut is None:
                break
            self._emit(cut, out)
        return out

    def flush(self) -> list[str]:
        out: list[str] = []
        while len(self._buf.strip()) > self.max_chunk_chars:
            self._emit(self._forced_cut(), out)
        rest = self._buf.strip()
        if rest:
            out.append(rest)
        self._buf = ""
        self._emitted = 0
        return out

    # ------------------------------------------------------------------ internals
    def _emit(self, cut: int, out: list[str]) -> None:
        chunk = self._buf[:cut].strip()
        self._buf = self._buf[cut:].lstrip()
        if chunk:
            out.append(chunk)
            self._emitted += 1

    def _find_cut(self) -> int | None:
        buf = self._buf
        tokens = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(buf)]
        if not tokens:
            return None
        chunk_start = tokens[0][0]
        fast_first = self._emitted == 0 and self.first_chunk_words > 0
        for i, (start, end, tok) in enumerate(tokens):
            if end >= len(buf):
                break  # the last token may still be growing
            gap_end = tokens[i + 1][0] if i + 1 < len(tokens) else len(buf)
            if end - chunk_start > self.max_chunk_chars:
                break
            long_enough = end - chunk_start >= self.min_chunk_chars
            prev = tokens[i - 1][2] if i > 0 else ""
            kind = self._sentence_end(tok, prev, buf, gap_end)
            # A one-word opening sentence ("Yes.") would play out long before the next chunk is
            # ready: the turn's first chunk takes the next sentence or clause along with it.
            first_too_short = self._emitted == 0 and end - chunk_start < self.min_first_chars
            if kind is True and long_enough and not first_too_short:
                return end
            if "\n" in buf[end:gap_end] and long_enough and kind is not None and self._may_cut_after(tok, prev):
                return end  # a line break (list item, paragraph) ends a chunk
            if fast_first and long_enough and end - chunk_start >= self.min_first_chars:
                if self._clause_break(tok, prev):
                    return end
                if i + 1 >= self.first_chunk_words and self._word_boundary(tok, prev) and _word_follows(tokens, i):
                    return end
        if len(buf.strip()) > self.max_chunk_chars:
            return self._forced_cut()
        return None

    def _sentence_end(self, tok: str, prev: str, buf: str, gap_end: int) -> bool | None:
        """True: a sentence ends after `tok`; False: it does not; None: not known yet."""
        core = _core(tok)
        if not core or core[-1] not in ".!?…":
            return False
        nxt = _NEXT_ALNUM.search(buf, gap_end)
        if nxt is None:
            return None  # need the next sentence's first letter to decide
        ch = nxt.group()
        if ch.islower():
            return False  # abbreviation or ellipsis inside a sentence
        if core[-1] in "!?" or _has_closer(tok):
            return True
        if core.endswith("...") or core.endswith("…"):
            return ch.isupper()
        word = _abbr_word(core)
        if not word:
            return True
        if word == "г" and not _is_number(prev):
            return False  # "г. Москва": город, not год
        if word.isdigit() and not prev:
            return False  # "1. Хлеб": a list item's number at the start of a chunk
        if word in _NEVER_FINAL and word not in _MAYBE_FINAL:
            return False
        if _is_initial(core):
            return False  # "А. С. Пушкин", "J. K. Rowling"
        if word in _MAYBE_FINAL or re.fullmatch(r"(?:\w\.)+\w", word):
            return ch.isupper()
        return True

    def _may_cut_after(self, tok: str, prev: str) -> bool:
        """False after tokens that bind to the next word (Mr., т., initials, г. before a name)."""
        core = _core(tok)
        if core.endswith(".") and not _has_closer(tok):
            word = _abbr_word(core)
            if word in _MAYBE_FINAL and prev.lower() == "т.":
                return True  # "т. д.", "т. п." close their phrase
            if word in _NEVER_FINAL or _is_initial(core):
                return False
            if word == "г" and not _is_number(prev):
                return False
        return True

    def _clause_break(self, tok: str, prev: str) -> bool:
        core = _core(tok)
        if tok in _DASHES:
            return bool(prev) and not _is_number(prev)  # "10 - 20" is a range
        return bool(core) and core[-1] in _CLAUSE_PUNCT and len(core) > 1

    def _word_boundary(self, tok: str, prev: str) -> bool:
        """A place where a fast first chunk may end without splitting a phrase."""
        core = _core(tok).strip(_OPENERS)
        if not core or _is_number(core) or core.lower() in _FUNCTION_WORDS:
            return False
        if not self._may_cut_after(tok, prev):
            return False
        if core.endswith(".") and _abbr_word(core) in _MAYBE_FINAL:
            return False
        return tok not in _DASHES

    def _forced_cut(self) -> int:
        """Cut a too-long chunk: its last clause break, else its last word boundary that
        keeps phrases together, else its last gap that keeps bound pairs (Mr. Smith) together."""
        buf = self._buf
        tokens = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(buf)]
        limit = tokens[0][0] + self.max_chunk_chars
        clause = word = safe = any_gap = None
        for i, (start, end, tok) in enumerate(tokens[:-1]):
            if end > limit:
                break
            prev = tokens[i - 1][2] if i > 0 else ""
            any_gap = end
            if self._may_cut_after(tok, prev) and _core(tok).lower() not in _FUNCTION_WORDS:
                safe = end
                if self._word_boundary(tok, prev) and _word_follows(tokens, i):
                    word = end
                if self._clause_break(tok, prev) or _ends_sentence_mark(tok):
                    clause = end
        for cut in (clause, word, safe, any_gap):
            if cut is not None:
                return cut
        return limit  # one run of non-space characters longer than the limit


def _word_follows(tokens: list[tuple[int, int, str]], i: int) -> bool:
    """Whether token i is followed by a word (not yet known, or a lone dash: no cut before it)."""
    return i + 1 < len(tokens) and _NEXT_ALNUM.search(tokens[i + 1][2]) is not None


def _ends_sentence_mark(tok: str) -> bool:
    core = _core(tok)
    return bool(core) and core[-1] in ".!?…"
