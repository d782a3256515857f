"""Which model's child holds each conversation's resumable stream (llama-server's ``conv_models``), so the stream
routes go straight to it.

A POST that carries ``X-Conversation-Id`` is remembered, with its model, before it waits for that model to load.
Its :class:`Ticket` stays valid until a stop of the conversation (``DELETE /v1/stream``) forgets it, or a newer
request of the conversation takes its place: either cancels the request if it still waits, so a stop during a
load leaves no generation behind.

Every client can name new conversations, so the entries are bounded, which llama-server's are not: at most
:data:`MAX_CONVERSATIONS`, each for :data:`CONVERSATION_TTL_S` after the request that last named it. Past either
bound the conversation named longest ago goes first, counted in the router's ``/metrics``. A dropped entry, like
a stale one, only costs its stream routes a 404 (llama-server's "best effort"): its request is not cancelled,
since a stop may come only from its own conversation, never from other clients naming enough others. A request
still waiting for its model when its entry goes thus runs, and a stop no longer reaches it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..api.monitoring import Metric, counter
from .instance import Instance

#: The conversations remembered. An entry is a few hundred bytes; 4096 is well past the streams the children keep
#: (:data:`~lfmserve.api.stream_sessions.MAX_SESSIONS` finished ones each, and the running ones).
MAX_CONVERSATIONS = 4096
#: How long a conversation is remembered after the request that last named it: an hour, well past a stream's
#: 300 s of replay after its answer, unless the answer itself ran for most of that hour.
CONVERSATION_TTL_S = 3600.0


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's claim on its conversation; ``stopped`` is set when the claim ends (a stop, a newer request)."""

    instance: Instance
    #: When the request named the conversation (the owners' clock): the entry's age counts from here.
    named_at: float
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class ConversationOwners:
    """Conversation id -> the model serving its stream, with the ticket of the request that last named it.

    Example::

        owners = ConversationOwners(max_conversations=2)
        for conversation_id in ("a", "b", "c"):
            owners.remember(conversation_id, instance)
        owners.owner("a")  # None: the oldest went when "c" came
    """

    def __init__(
        self,
        *,
        max_conversations: int = MAX_CONVERSATIONS,
        ttl_s: float = CONVERSATION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_conversations = max_conversations
        self.ttl_s = ttl_s
        self._clock = clock
        #: Oldest first: a conversation named again moves to the end.
        self._tickets: dict[str, Ticket] = {}
        #: Entries that went for :attr:`ttl_s`, and those that went early for :attr:`max_conversations`.
        self.n_expired = 0
        self.n_dropped = 0

    def remember(self, conversation_id: str, instance: Instance) -> Ticket:
        """The conversation is now ``instance``'s; the request that held it before loses its claim."""
        self._expire()
        previous = self._tickets.pop(conversation_id, None)
        if previous is not None:
            previous.stopped.set()
        ticket = self._tickets[conversation_id] = Ticket(instance, self._clock())
        excess = len(self._tickets) - self.max_conversations
        for oldest in list(itertools.islice(self._tickets, max(excess, 0))):
            del self._tickets[oldest]
        self.n_dropped += max(excess, 0)
        return ticket

    def owner(self, conversation_id: str) -> Instance | None:
        self._expire()
        ticket = self._tickets.get(conversation_id)
        return None if ticket is None else ticket.instance

    def forget(self, conversation_id: str) -> None:
        """A stop: the conversation maps to nothing, and a request of it still waiting is cancelled."""
        ticket = self._tickets.pop(conversation_id, None)
        if ticket is not None:
            ticket.stopped.set()

    def __len__(self) -> int:
        """The conversations remembered now (those past their age are let go first)."""
        self._expire()
        return len(self._tickets)

    def metrics(self) -> list[Metric]:
        """What the router's ``/metrics`` says of them: how many it holds, and how many it let go, and why."""
        return [
            Metric("lfmserve:conversations", "gauge", "Conversations whose stream owner is remembered.", len(self)),
            counter("conversations_expired", "Conversations forgotten for their age.", self.n_expired),
            counter("conversations_dropped", "Conversations forgotten early, for their count.", self.n_dropped),
        ]

    def _expire(self) -> None:
        """Let go of the entries past their age: the oldest come first, so the scan stops at the first young one."""
        cutoff = self._clock() - self.ttl_s
        stale = [key for key, _ in itertools.takewhile(lambda item: item[1].named_at <= cutoff, self._tickets.items())]
        for key in stale:
            del self._tickets[key]
        self.n_expired += len(stale)
