"""A connection's life as proxy/forward/connection.py names it: `Phase`s changed only by
the `Move`s `TRANSITIONS` allows. The table is walked whole, every (phase, move) pair:
on the table itself, then on a real `Connection` (in its event loop, its two sockets
stood in for by transports that record what is done to them) brought to the phase by
the calls that bring a proxied connection there and moved by the call that makes the
move (connection_made, upstream_made, begin_drain, close): an allowed move lands where
the table says, a forbidden one raises PhaseError and changes nothing."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from codec import ApiKey, Request, Response, encode_request, encode_response
from proxy.config import Address, Limits
from proxy.forward.connection import (
    TRANSITIONS,
    Connection,
    ListenerRoute,
    Move,
    Paused,
    Phase,
    PhaseError,
    ProxyContext,
    next_phase,
)
from proxy.hooks import Hooks
from proxy.metrics import Metrics

PAIRS = list(itertools.product(Phase, Move))


def test_the_table_names_every_phase_and_each_move_once() -> None:
    assert set(TRANSITIONS) == set(Phase)
    for phase, moves in TRANSITIONS.items():
        assert set(moves) <= set(Move), phase


@pytest.mark.parametrize(("phase", "move"), PAIRS, ids=[f"{p.value}-{m.value}" for p, m in PAIRS])
def test_next_phase_walks_the_table(phase: Phase, move: Move) -> None:
    allowed = TRANSITIONS[phase]
    if move in allowed:
        assert next_phase(phase, move) is allowed[move]
    else:
        with pytest.raises(PhaseError) as info:
            next_phase(phase, move)
        assert (info.value.phase, info.value.move) == (phase, move)
        assert phase.value in str(info.value) and move.value in str(info.value)


def test_every_phase_is_reached_and_every_connection_can_close() -> None:
    reached, frontier = {Phase.ACCEPTED}, [Phase.ACCEPTED]
    while frontier:
        for after in TRANSITIONS[frontier.pop()].values():
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(Phase)
    for phase in Phase:  # from anywhere, a closed connection in at most two moves
        assert Phase.CLOSED in {
            second
            for after in TRANSITIONS[phase].values()
            for second in (after, *TRANSITIONS[after].values())
        }, phase


# --- the real connection -------------------------------------------------------------


class Socket(asyncio.Transport):
    """One side's transport: what the connection wrote to it, and whether it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.reading = True
        self.closing = False
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("10.0.0.9", 50000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True


class Told(Hooks):
    """Hooks that count what the connection told them."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    def connection_closed(self, info: Any, reason: str) -> None:
        self.closed.append(reason)


class Case:
    """A Connection in its loop, with the moves it made."""

    def __init__(self) -> None:
        self.hooks = Told()
        # the broker's address is never dialled: the connecting task never gets to run
        route = ListenerRoute("plaintext", (Address("127.0.0.1", 9),))
        self.ctx = ProxyContext(Limits(), self.hooks, Metrics())
        self.conn = Connection(self.ctx, route)
        self.client, self.broker = Socket(), Socket()
        self.moves: list[tuple[Phase, Move, Phase]] = []
        made = self.conn._move

        def recorded(move: Move) -> Phase:
            before = self.conn.phase
            after = made(move)
            self.moves.append((before, move, after))
            return after

        self.conn._move = recorded  # type: ignore[method-assign]

    def admit(self) -> None:
        self.conn.connection_made(self.client)

    def refuse(self) -> None:
        self.ctx.accepting = False
        self.conn.connection_made(self.client)

    def upstream_up(self) -> None:
        self.conn.upstream_made(self.broker)

    def drain(self) -> None:
        self.conn.begin_drain()

    def close(self) -> None:
        self.conn.close("client_eof")

    def request(self) -> None:
        """A request forwarded, its answer not yet come: a drain then waits for it."""
        frame = encode_request(Request(ApiKey.API_VERSIONS, 0, {"correlation_id": 7, "client_id": "c"}, {}))
        self.conn.data_received(len(frame).to_bytes(4, "big") + frame)
        assert self.broker.written and self.conn.in_flight == 1

    def answer(self) -> None:
        body = {"error_code": 0, "api_keys": []}
        frame = encode_response(Response(ApiKey.API_VERSIONS, 0, {"correlation_id": 7}, body))
        self.conn.upstream_data(len(frame).to_bytes(4, "big") + frame)


# How a connection is brought to each phase, by the calls the proxy makes.
TO: dict[Phase, Callable[[Case], None]] = {
    Phase.ACCEPTED: lambda case: None,
    Phase.CONNECTING: Case.admit,
    Phase.OPEN: lambda case: (case.admit(), case.upstream_up()),
    Phase.DRAINING: lambda case: (case.admit(), case.upstream_up(), case.request(), case.drain()),
    Phase.CLOSED: lambda case: (case.admit(), case.close()),
}
# The call that makes each move.
DO: dict[Move, Callable[[Case], None]] = {
    Move.ADMIT: Case.admit,
    Move.REFUSE: Case.refuse,
    Move.UPSTREAM_UP: Case.upstream_up,
    Move.DRAIN: Case.drain,
    Move.CLOSE: Case.close,
}


def run(steps: Callable[[Case], None]) -> Case:
    async def main() -> Case:
        case = Case()
        try:
            steps(case)
        finally:
            if case.conn.phase is not Phase.ACCEPTED and not case.conn.closed:
                case.conn.close("shutdown")  # cancels the connecting task
        return case

    return asyncio.run(main())


@pytest.mark.parametrize(("phase", "move"), PAIRS, ids=[f"{p.value}-{m.value}" for p, m in PAIRS])
def test_a_connection_makes_the_moves_its_phase_allows_and_no_other(phase: Phase, move: Move) -> None:
    outcome: dict[str, Any] = {}

    def steps(case: Case) -> None:
        TO[phase](case)
        assert case.conn.phase is phase
        outcome["made"] = len(case.moves)
        try:
            DO[move](case)
        except PhaseError as exc:
            outcome["error"] = exc
        outcome["phase"] = case.conn.phase

    case = run(steps)
    if move not in TRANSITIONS[phase]:
        assert isinstance(outcome.get("error"), PhaseError), outcome
        assert outcome["phase"] is phase  # a refused move changes nothing
        return
    assert "error" not in outcome, outcome
    first = case.moves[outcome["made"]]
    assert first == (phase, move, TRANSITIONS[phase][move])


def test_a_whole_life_as_the_proxy_lives_it() -> None:
    case = run(lambda case: (case.admit(), case.upstream_up(), case.request(), case.answer(), case.close()))
    assert [(before.value, move.value) for before, move, _ in case.moves] == [
        ("accepted", "admit"), ("connecting", "upstream_up"), ("open", "close"),
    ]  # fmt: skip
    assert case.hooks.closed == ["client_eof"]
    assert case.client.written  # the answer went back


def test_a_drain_waits_for_the_answers_then_closes() -> None:
    def steps(case: Case) -> None:
        TO[Phase.DRAINING](case)
        assert case.conn._client_paused & Paused.DRAINING
        assert not case.client.reading  # no new requests
        case.answer()

    case = run(steps)
    assert case.moves[-1] == (Phase.DRAINING, Move.CLOSE, Phase.CLOSED)
    assert case.hooks.closed == ["shutdown"]


def test_a_drain_while_connecting_closes_at_once_and_a_late_broker_is_cut() -> None:
    def steps(case: Case) -> None:
        case.admit()
        case.drain()
        assert case.conn.phase is Phase.CLOSED
        case.upstream_up()

    case = run(steps)
    assert [move for _, move, _ in case.moves] == [Move.ADMIT, Move.DRAIN, Move.CLOSE, Move.UPSTREAM_UP]
    assert case.broker.aborted
    assert case.hooks.closed == ["shutdown"]


def test_a_refused_connection_is_never_opened_and_a_closed_one_tells_the_hooks_once() -> None:
    refused = run(Case.refuse)
    assert refused.conn.phase is Phase.CLOSED and refused.client.aborted
    assert refused.conn.info is None and refused.hooks.closed == []
    twice = run(lambda case: (case.admit(), case.close(), case.close(), case.drain()))
    assert twice.hooks.closed == ["client_eof"]
