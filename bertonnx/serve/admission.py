"""The engine's cost per token, as the queue-wait admission (``--max-queue-wait``) estimates it.

The scheduler refuses a request (429) when the work queued with it would take longer than
``--max-queue-wait``. The estimate used to be the seconds per token of the last 32 batches. That lies
after contention: batches slowed by a burst of other work on the machine (12 huge texts tokenizing at
once took both cores for 10-17 s) taught it a cost several times the real one, and small legal requests
then got 429 "about 63 s of work queued" for a queue the engine cleared in a second.

What :class:`TokenCost` does instead:

- a batch's cost is counted per token of at least ``EFFICIENT_TOKENS``: a run of 6 tokens costs about
  what a run of a few hundred does (fixed overhead), so small batches do not inflate the per-token cost
  of a queue that will run in large batches;
- the floor is the machine's capacity: the lowest per-token cost seen so far in a run of at least
  ``EFFICIENT_TOKENS`` real tokens (the engine at full speed; a lone short input's run, cheap in absolute
  terms, says nothing of what a queue of long ones costs per token);
- the ceiling is ``CEILING`` times that floor: contention can make the estimate pessimistic by that
  much at most, never by the 30x seen;
- recent batches count only for ``HORIZON_S`` seconds: after a burst, the estimate is back to the
  capacity once the slowed batches are that old (and while the machine stays busy, recent batches keep
  telling the truth within the ceiling).
"""

from __future__ import annotations

import time
from collections import deque

__all__ = ["CEILING", "EFFICIENT_TOKENS", "HORIZON_S", "TokenCost"]

#: Tokens below which a batch is counted as this many (its cost is mostly fixed overhead).
EFFICIENT_TOKENS = 256
#: The estimate is at most this many times the lowest per-token cost seen.
CEILING = 4.0
#: Seconds a batch's cost counts in the estimate.
HORIZON_S = 10.0
#: Batches remembered at most.
RECENT_BATCHES = 64


class TokenCost:
    """Seconds per token of an engine run: recent batches' cost, between the best seen and ``ceiling`` × it.

    Args:
        efficient_tokens: a batch of fewer tokens counts as this many.
        ceiling: the estimate is at most this multiple of the lowest per-token cost seen.
        horizon_s: seconds a batch counts in the recent cost.
    """

    def __init__(
        self, efficient_tokens: int = EFFICIENT_TOKENS, ceiling: float = CEILING, horizon_s: float = HORIZON_S
    ) -> None:
        self.efficient_tokens = efficient_tokens
        self.ceiling = ceiling
        self.horizon_s = horizon_s
        self.best: float | None = None
        self._last: float | None = None
        self._recent: deque[tuple[float, int, float]] = deque(maxlen=RECENT_BATCHES)

    def observe(self, tokens: int, elapsed: float, now: float | None = None) -> None:
        """Record one engine run of ``tokens`` tokens that took ``elapsed`` seconds (ended at ``now``)."""
        counted = max(tokens, self.efficient_tokens)
        if elapsed <= 0:
            return
        cost = elapsed / counted
        # only a run of at least efficient_tokens real tokens tells the machine's capacity: a lone 12-token run costs
        # far less than 256 tokens' worth on a fast CPU, and taken as the floor it capped the estimate at a few times
        # too little (a queue of 40 s of work estimated at 14 s: 504s for accepted requests)
        if tokens >= self.efficient_tokens:
            self.best = cost if self.best is None else min(self.best, cost)
        self._last = cost
        self._recent.append((time.monotonic() if now is None else now, counted, elapsed))

    def seconds_per_token(self, now: float | None = None) -> float | None:
        """The estimate (``None`` before the first run)."""
        if self._last is None:
            return None
        now = time.monotonic() if now is None else now
        while self._recent and now - self._recent[0][0] > self.horizon_s:
            self._recent.popleft()
        if not self._recent:
            return self.best if self.best is not None else self._last
        recent = sum(elapsed for _, _, elapsed in self._recent) / sum(tokens for _, tokens, _ in self._recent)
        if self.best is None:  # no large run yet: the recent runs as they are
            return recent
        return min(max(recent, self.best), self.ceiling * self.best)
