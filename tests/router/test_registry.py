"""The registry and the pool over fake children (:mod:`tests.router.fake_children`): a model that a reload removes
and the next adds back, a request waiting for a model that a reload removes, and random sequences of reloads,
requests, loads, unloads, expiries and child exits, checked against the invariants after every step."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lfmserve.errors import InvalidRequest, LfmError, Unavailable
from lfmserve.router.catalog import ModelSpec
from lfmserve.router.events import Events
from lfmserve.router.instance import LOADING, Instance
from lfmserve.router.pool import LoadFailed, Pool
from lfmserve.settings import RouterSettings
from tests.router.fake_children import Clock, FakeProcess, FakeSpawner, describe, fake_process, spec, until

#: Sequences generated in the default run: every one is a whole router's life, in a few milliseconds.
EXAMPLES = 1000
#: Turns of the event loop with nothing starting after which the router has done all a step set off.
_QUIET_TURNS = 10
#: How long the loop waits in its selector while a child's start runs in its thread.
_START_WAIT_S = 0.0002


def test_a_model_added_back_while_its_child_stops_is_served_by_a_new_child_once_the_old_one_exits() -> None:
    spawner = FakeSpawner()

    async def scenario() -> None:
        pool = Pool({"text": spec("text")}, RouterSettings(), spawner, Events(), describe)
        pool.start()
        old = pool.registry.get("text")
        first = await _serve(pool, old, spawner)
        pool.release(old)
        removing = asyncio.create_task(pool.reload({}))  # waits for the child to stop
        await until(first.asked_to_exit)
        await pool.reload({"text": spec("text")})  # back, while its old child still stops
        assert first.end() == 0
        await removing
        new = pool.registry.get("text")
        assert new is not old and old.removed and not new.removed
        assert pool.registry.retiring == []
        second = await _serve(pool, new, spawner)
        assert (second is not first, new.status, old.status) == (True, "loaded", "unloaded")
        pool.release(new)
        await _close_pool(pool, spawner)
        assert second.exitcode == 0

    asyncio.run(scenario())
    spawner.close()


def test_a_request_waiting_for_a_model_that_a_reload_removes_is_told_it_is_not_found() -> None:
    spawner = FakeSpawner()

    async def scenario() -> None:
        catalog = {"text": spec("text"), "vision": spec("vision")}
        pool = Pool(catalog, RouterSettings(models_max=1), spawner, Events(), describe)
        pool.start()
        text, vision = pool.registry.get("text"), pool.registry.get("vision")
        first = await _serve(pool, text, spawner)  # busy: nothing can make room for vision
        waiting = asyncio.create_task(pool.acquire(vision, autoload=True, touch=True))
        await until(lambda: vision.waiting == 1)
        await pool.reload({"text": spec("text")})
        with pytest.raises(InvalidRequest) as refused:
            await waiting
        assert refused.value.message == "model 'vision' not found"
        assert (len(spawner.processes), pool.registry.retiring) == (1, [])
        pool.release(text)
        await _close_pool(pool, spawner)
        assert first.exitcode == 0

    asyncio.run(scenario())
    spawner.close()


async def _close_pool(pool: Pool, spawner: FakeSpawner) -> None:
    """Shut the router down, ending each child once it is asked to exit or killed."""
    closing = asyncio.create_task(pool.close())

    def closed() -> bool:
        for process in spawner.live():
            if process.killed or process.asked_to_exit():
                process.end()
        return closing.done()

    await until(closed)
    await closing


async def _serve(pool: Pool, instance: Instance, spawner: FakeSpawner) -> FakeProcess:
    """A request for ``instance``: its model loads (a new fake child, which reports ready), and the request gets it."""
    started = len(spawner.processes)
    acquiring = asyncio.create_task(pool.acquire(instance, autoload=True, touch=True))
    await until(lambda: len(spawner.processes) > started)
    process = spawner.processes[-1]
    process.tell_ready()
    child = await acquiring
    assert fake_process(child) is process
    return process


# -- random sequences ------------------------------------------------------------------------------------------

NAMES = ("text", "vision", "embed")
ALIASES = {"text": ("chat",)}
#: What a request may name: the models, an alias, and a name no model has.
ASKED = (*NAMES, "chat", "nobody")


def _catalog(variants: dict[str, int]) -> dict[str, ModelSpec]:
    """The models named, each in one of two variants (a reload that changes the variant changes the model): the
    second has a time-to-live and a stop that kills at once."""
    return {
        name: spec(name, *ALIASES.get(name, ()), ttl_s=5.0, stop_timeout_s=0.0)
        if variant
        else spec(name, *ALIASES.get(name, ()))
        for name, variant in variants.items()
    }


@dataclass(frozen=True)
class Reload:
    """``GET /models?reload=1`` finding these models (each in a variant of :func:`_catalog`)."""

    variants: dict[str, int]


@dataclass(frozen=True)
class Request:
    """A request naming ``name``; ``hold`` keeps its model busy until a ``finish`` :class:`Pick` ends it."""

    name: str
    hold: bool


@dataclass(frozen=True)
class Pick:
    """One of the held requests ends (``finish``), one of the children still loading reports ready (``ready``), or
    one of the live children exits: killed, as asked, or of itself (``exit``, :meth:`FakeProcess.end`)."""

    action: Literal["finish", "ready", "exit"]
    index: int


@dataclass(frozen=True)
class Manage:
    """``POST /models/load`` or ``POST /models/unload``."""

    action: Literal["load", "unload"]
    name: str


@dataclass(frozen=True)
class Expire:
    """Time passes beyond the time-to-live, and the expiry watch looks."""


@dataclass(frozen=True)
class RefuseStart:
    """The next child cannot be started."""


Step = Reload | Request | Pick | Manage | Expire | RefuseStart

#: Each model in a variant, or left out.
_VARIANTS = st.fixed_dictionaries({}, optional={name: st.integers(0, 1) for name in NAMES})
_INDEX = st.integers(0, 7)
#: Each kind of step and how often it comes: requests and children becoming ready most (and first: hypothesis's
#: simplest choice), so that most sequences load models, then reload, stop, expire and crash loaded ones.
_KINDS: list[tuple[int, st.SearchStrategy[Step]]] = [
    (4, st.builds(Request, st.sampled_from(ASKED), st.booleans())),
    (4, st.builds(Pick, st.just("ready"), _INDEX)),
    (2, st.builds(Reload, _VARIANTS)),
    (2, st.builds(Pick, st.just("finish"), _INDEX)),
    (2, st.builds(Pick, st.just("exit"), _INDEX)),
    (2, st.builds(Manage, st.sampled_from(["load", "unload"]), st.sampled_from(ASKED))),
    (1, st.just(Expire())),
    (1, st.just(RefuseStart())),
]
STEPS = st.sampled_from([kind for weight, kind in _KINDS for _ in range(weight)]).flatmap(lambda kind: kind)


@dataclass
class World:
    """A router's pool over fake children, and what the steps have seen of it."""

    pool: Pool
    spawner: FakeSpawner
    clock: Clock
    catalog: dict[str, ModelSpec]
    requests: list[asyncio.Task[None]] = field(default_factory=list)
    held: list[Instance] = field(default_factory=list)
    #: Every instance the registry has held: one it dropped with a live child would be lost.
    seen: list[Instance] = field(default_factory=list)
    #: The models whose child died before it was ready: their requests may get a 500, as a refused start's may.
    failed_loads: set[str] = field(default_factory=set)
    #: The API's errors answered, with the name of the model asked for.
    refusals: list[tuple[str, LfmError]] = field(default_factory=list)

    def observe(self) -> None:
        for instance in self.pool.registry.every_instance():
            if instance not in self.seen:
                self.seen.append(instance)

    def starting(self) -> bool:
        """A child is being started (its launch waits for the spawner's thread)."""
        return any(instance.status == LOADING and instance.child is None for instance in self.seen)


async def _settle(world: World) -> None:
    """Let the router do all that the last step set off: the loop has run a while with no child being started.

    While a child is being started, the loop waits in its selector a moment rather than spinning through turns:
    the start runs in a thread, which a spinning loop keeps from the GIL (four million turns, most of this test's
    time, when it spun)."""
    quiet = 0
    deadline = asyncio.get_running_loop().time() + 10
    while quiet < _QUIET_TURNS:
        assert asyncio.get_running_loop().time() < deadline, "the router never settled"
        await asyncio.sleep(_START_WAIT_S if world.starting() else 0)
        world.observe()
        quiet = 0 if world.starting() else quiet + 1


async def _request(world: World, name: str, hold: bool) -> None:
    """A request as the router's routes make it: the model by its name, then its child once it serves."""
    try:
        instance = world.pool.registry.get(name)
    except LfmError as exc:
        world.refusals.append((name, exc))
        return
    try:
        child = await world.pool.acquire(instance, autoload=True, touch=True)
    except LfmError as exc:
        world.refusals.append((instance.name, exc))
        return
    assert instance.serving and child is instance.child
    if hold:
        world.held.append(instance)
    else:
        world.pool.release(instance)


def _pick(items: list[FakeProcess], index: int) -> FakeProcess | None:
    return items[index % len(items)] if items else None


async def _apply(world: World, step: Step) -> None:
    pool, spawner = world.pool, world.spawner
    match step:
        case Reload(variants):
            world.catalog = _catalog(variants)
            world.requests.append(asyncio.create_task(pool.reload(world.catalog)))
        case Request(name, hold):
            world.requests.append(asyncio.create_task(_request(world, name, hold)))
        case Pick("finish", index) if world.held:
            pool.release(world.held.pop(index % len(world.held)))
        case Pick("ready", index):
            loading = _pick([p for p in spawner.live() if not p.ready and not p.killed], index)
            if loading is not None:
                loading.tell_ready()
        case Pick("exit", index):
            process = _pick(spawner.live(), index)
            if process is not None and process.end() == 1 and not process.ready:
                world.failed_loads.add(process.name)
        case Manage(action, name):
            try:
                await pool.unload(name) if action == "unload" else pool.load(name)
            except LfmError as exc:
                world.refusals.append((name, exc))
        case Expire():
            world.clock.now += 6
            pool.expire_idle()
        case RefuseStart():
            spawner.refuse = OSError("fork failed")


def _check(world: World) -> None:
    """The invariants: every listed model resolves by each of its names, and only those do; no instance with a live
    child is lost; every refusal is the API's 4xx or 503 (a 500 only for a load that failed)."""
    registry = world.pool.registry
    assert sorted(registry.instances) == sorted(world.catalog)
    for instance in registry.instances.values():
        assert all(registry.find(name) is instance for name in instance.spec.names)
    assert registry.find("nobody") is None
    tracked = registry.every_instance()
    assert [i for i in world.seen if i.running and i not in tracked] == []
    owners = [fake_process(i.child) for i in tracked if i.child is not None]
    assert all(any(process is owner for owner in owners) for process in world.spawner.live())
    for name, refusal in world.refusals:
        allowed = refusal.status_code < 500 or isinstance(refusal, Unavailable)
        failed = name in world.failed_loads or name in world.spawner.refused
        assert allowed or (isinstance(refusal, LoadFailed) and failed), (name, refusal)
    for request in world.requests:
        if request.done():
            request.result()  # nothing else raised


async def _close(world: World) -> None:
    """The router shut down after the last step: no child left, no model retiring, no request waiting, no task
    running, and the invariants still hold."""
    for instance in world.held:
        world.pool.release(instance)
    await _close_pool(world.pool, world.spawner)
    assert world.spawner.live() == []
    assert world.pool.registry.retiring == []
    await _settle(world)
    assert all(request.done() for request in world.requests)  # none waits for ever
    assert asyncio.all_tasks() == {asyncio.current_task()}
    _check(world)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for every sequence (a loop and its worker thread, made afresh, would take most of the time)."""
    with asyncio.Runner() as runner:
        yield runner


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(
    first=st.fixed_dictionaries({name: st.integers(0, 1) for name in NAMES}),
    models_max=st.integers(0, 2),
    steps=st.lists(STEPS, min_size=6, max_size=24),
)
def test_random_reloads_requests_and_exits_keep_every_name_served_and_every_child_tracked(
    runner: asyncio.Runner, first: dict[str, int], models_max: int, steps: list[Step]
) -> None:
    spawner = FakeSpawner()

    async def scenario() -> None:
        clock = Clock()
        catalog = _catalog(first)
        pool = Pool(catalog, RouterSettings(models_max=models_max), spawner, Events(), describe, clock)
        world = World(pool, spawner, clock, catalog)
        pool.start()
        for step in steps:
            await _apply(world, step)
            await _settle(world)
            _check(world)
        await _close(world)

    try:
        runner.run(scenario())
    finally:
        spawner.close()
