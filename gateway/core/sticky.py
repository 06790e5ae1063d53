"""Events an agent must see even when it attaches late: an outbound call's progress and outcome (docs/protocol.md).

An outbound call (`POST /v1/calls`) sends `call.progress`, then `call.answered` or `call.failed`, whether or not
an agent is attached yet. The registry keeps the latest event of each type per call id and replays them, in the
order the types first came, right after `call.attached`. A call's record lives while the call does and `keep_s`
after it ended (a call that failed before anyone attached still answers an attach with its `call.failed`); at
most `max_calls` records are kept, the oldest dropped first, so a flood of calls cannot grow it without bound.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque

KEEP_S = 60.0
MAX_CALLS = 4096


class _Record:
    __slots__ = ("events", "ended")

    def __init__(self):
        self.events: dict[str, dict] = {}  # event type -> its latest event, in the order the types first came
        self.ended = False


class StickyEvents:
    def __init__(self, keep_s: float = KEEP_S, max_calls: int = MAX_CALLS, clock=time.monotonic):
        self.keep_s = keep_s
        self.max_calls = max_calls
        self.clock = clock
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._expiry: deque[tuple[float, str, _Record]] = deque()  # ended records, in the order they expire

    def __len__(self) -> int:
        return len(self._records)

    def open(self, call_id: str) -> None:
        """A call whose events will come (an INVITE about to go out): it is known before its first event."""
        self._record(call_id)

    def keep(self, call_id: str, event: dict) -> None:
        """Remember `event` for `call_id`, replacing the call's earlier event of the same type."""
        self._record(call_id).events[event["type"]] = event

    def end(self, call_ids) -> None:
        """These calls are over: their records live `keep_s` more for a late attach, then go."""
        expires = self.clock() + self.keep_s
        for call_id in call_ids:
            record = self._records.get(call_id)
            if record is not None and not record.ended:
                record.ended = True
                self._expiry.append((expires, call_id, record))

    def ids(self) -> list[str]:
        """The calls kept now, live or ended (in a call plane their claims live as long: gateway/core/call_core.py)."""
        self._prune()
        return list(self._records)

    def replay(self, call_id: str) -> list[dict]:
        """The call's kept events, in order ([] for a call with none)."""
        self._prune()
        record = self._records.get(call_id)
        return list(record.events.values()) if record is not None else []

    def state(self, call_id: str) -> str | None:
        """ "live" (events may still come), "ended" (kept for a late attach) or None (not known)."""
        self._prune()
        record = self._records.get(call_id)
        if record is None:
            return None
        return "ended" if record.ended else "live"

    def _record(self, call_id: str) -> _Record:
        self._prune()
        record = self._records.get(call_id)
        if record is None:
            record = self._records[call_id] = _Record()
            while len(self._records) > self.max_calls:
                self._records.popitem(last=False)
        return record

    def _prune(self) -> None:
        now = self.clock()
        while self._expiry and self._expiry[0][0] <= now:
            _, call_id, record = self._expiry.popleft()
            if self._records.get(call_id) is record:
                del self._records[call_id]
