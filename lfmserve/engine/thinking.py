"""Holding a generation to its reasoning budget: which tokens are thinking, and when to end it by force.

The engine thread tells the tracker each token the request generated; once the budget's count of thinking tokens
is spent, the tracker names the tokens to write instead of sampling (a message, then the end of the thinking),
one per step, and the model answers from there. A budget of 0 ends thinking as soon as it opens, also in models
that always think and whose templates have no switch. A budget's control ends it the same way when asked.
"""

from __future__ import annotations

from .records import ThinkingBudget


class ThinkingTracker:
    @staticmethod
    def of(budget: ThinkingBudget | None) -> ThinkingTracker | None:
        """The tracker of a request with a budget (None: it may think as long as it likes)."""
        return ThinkingTracker(budget) if budget is not None else None

    def __init__(self, budget: ThinkingBudget) -> None:
        self._budget = budget
        self._thinking = budget.starts_inside
        self._spent = 0
        self._forcing = 0
        self._recent: list[int] = []

    def forced_token(self) -> int | None:
        """The token to write instead of sampling now, or None. An end asked of the budget's control while the
        model thinks spends the budget now: the forced tokens start at this step."""
        budget = self._budget
        if budget.control is not None and budget.control.take() and self._thinking and self._spent < budget.budget:
            self._spent = budget.budget
        if self._thinking and self._spent >= budget.budget:
            return budget.forced[self._forcing]
        return None

    def accept(self, token: int) -> None:
        """A token the request generated (sampled or forced)."""
        budget = self._budget
        if self._thinking and self._spent >= budget.budget:  # writing the forced end
            self._forcing += 1
            if self._forcing == len(budget.forced):
                self._thinking, self._forcing, self._recent = False, 0, []
            return
        self._recent = (self._recent + [token])[-max(len(budget.start), len(budget.end)) :]
        if not self._thinking:
            if self._ends_with(budget.start):
                self._thinking, self._spent = True, 0
        elif self._ends_with(budget.end):
            self._thinking = False
        else:
            self._spent += 1

    def _ends_with(self, tokens: tuple[int, ...]) -> bool:
        return bool(tokens) and tuple(self._recent[-len(tokens) :]) == tokens
