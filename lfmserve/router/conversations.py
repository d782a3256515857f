"""Which model's child holds each conversation's resumable stream (llama-server's ``conv_models``), so the stream
routes go straight to it.

A POST that carries ``X-Conversation-Id`` is remembered, with its model, before it waits for that model to load.
Its :class:`Ticket` stays valid until a stop of the conversation (``DELETE /v1/stream``) forgets it, or a newer
request of the conversation takes its place: either cancels the request if it still waits, so a stop during a
load leaves no generation behind. Entries are kept until a stop: one that outlived its session only makes the
child answer 404.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .instance import Instance


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's claim on its conversation; ``stopped`` is set when the claim ends (a stop, a newer request)."""

    instance: Instance
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class ConversationOwners:
    """Conversation id -> the model serving its stream, with the ticket of the request that last named it."""

    def __init__(self) -> None:
        self._tickets: dict[str, Ticket] = {}

    def remember(self, conversation_id: str, instance: Instance) -> Ticket:
        """The conversation is now ``instance``'s; the request that held it before loses its claim."""
        previous = self._tickets.get(conversation_id)
        if previous is not None:
            previous.stopped.set()
        ticket = self._tickets[conversation_id] = Ticket(instance)
        return ticket

    def owner(self, conversation_id: str) -> Instance | None:
        ticket = self._tickets.get(conversation_id)
        return None if ticket is None else ticket.instance

    def forget(self, conversation_id: str) -> None:
        """A stop: the conversation maps to nothing, and a request of it still waiting is cancelled."""
        ticket = self._tickets.pop(conversation_id, None)
        if ticket is not None:
            ticket.stopped.set()
