"""The observers' chain: what its links share, and what a link is.

`kafkalens proxy` runs one `Hooks`: the request log's (observing_hooks.py). It decodes
each exchange once, whether its frames came whole, were memoised or streamed past
(streamed.py), keeps the connection's identity, and writes the request log's lines.
Between decoding and writing, it hands each exchange to its links, in the order they
were composed (proxy/features.py composes them, one a feature: KIP-1313, telemetry,
lag): each link is an `Observer`, sees only the apis it names (or, checking every
request, says so), and adds what it knows to the request's
`Token` (fields for the line, an ask its response is read against) before the line is
written. A link refers to nothing of the request log's hooks, nor to another link:
what they share is

* `ConnState`, one per connection, which the request log's hooks keep from its open
  to its close and hand to each call: the identity and what earlier messages taught
  (its fields say who writes them);
* `Token`, one per request, on `Pending.token`: the request's line fields as they are
  made, and what its response is to be read against (`ask`, `asked_by`);
* the process-wide objects the builder hands each link (`Shared`: metrics, topic ids,
  the summary options, the header policy).

A link keeps what it needs of a connection in its own object (`new_state`), which the
hooks keep in `ConnState.kept[link]` from the connection's open to its close; nothing
of a feature is a field of `ConnState`.

The line itself is the request log's hooks' to write: a link that answers a request
in the broker's place (telemetry's collect mode) returns an `Answer`, and the hooks
count and log it as any other exchange; a link that has something to warn of (a
KIP-1313 violation) returns a `Notice`, which the hooks write as a warning line; a link
that refuses a request before it is forwarded (KIP-1313's reject) returns a `Refusal`.

A link costs a request nothing unless it names its api: the request log's hooks look
the links up by api key, once per exchange; a link that checks every request
(`checks_requests`, KIP-1313's log mode) costs each one a call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codec import HeaderPolicy, Response
from proxy.hooks import ConnectionInfo, Pending
from proxy.metrics import Metrics
from proxy.observe.identity import Identity
from proxy.observe.instance_join import JoinKey
from proxy.observe.summary import GroupProtocols, SummaryOptions, TopicIds


@dataclass(slots=True)
class ConnState:
    """One connection as the observers know it (`ConnectionInfo.observed`); made by the
    request log's hooks when the connection opens, dropped when it closes."""

    identity: Identity  # who the client is: request headers, ApiVersions, SASL, KIP-714
    info: ConnectionInfo | None = None
    requests: dict[str, int] = field(default_factory=dict)  # by api: the close line's counts
    errors: dict[str, int] = field(default_factory=dict)  # by error name, likewise
    decode_errors: int = 0
    instance_reported: bool = False  # its instance id is on the connection's metrics
    groups: GroupProtocols = field(default_factory=GroupProtocols)  # protocol type per group
    # What identity looked like when last published, and its log fields then, as a dict
    # and rendered (request_line.identity_fragment): every line needs them, and they
    # change a handful of times per connection.
    identity_key: tuple[Any, ...] = ()
    log_fields: dict[str, Any] = field(default_factory=dict)
    identity_fragment: bytes = b""
    line_head: bytes = b""  # request_line.connection_head: what its request lines start with
    # Memoised requests (memo.RequestEntry) whose observing changed nothing here and
    # logged nothing: observing one again is skipped, until something of the identity
    # changes (the request log's hooks empty it then).
    quiet: set[Any] = field(default_factory=set)
    # The broker's ApiVersions ranges, api key -> (min, max), once it answered one here.
    broker_ranges: dict[int, tuple[int, int]] | None = None
    # The instance-id joins' (joining.py):
    join_key: JoinKey | None = None  # waiting under this key for its client's instance id
    joined: bool = False  # its instance id came from another connection
    joinable: bool = True  # False once it has a telemetry exchange of its own
    # Each link's own state of this connection, by link (Observer.new_state).
    kept: dict[Observer, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Token:
    """What a pending request carries until its response (`Pending.token`): plain
    values, no buffers. A memoised request whose api no link reads has its memo entry
    as token instead (memo.RequestEntry: these fields, read only)."""

    api: str
    correlation_id: int
    fields: dict[str, Any]  # the line's request fields; links add theirs
    decode_error: str | None = None
    # What a link read of the request that its response is read against (lag's and
    # share groups' asks), and that link: its `answered` makes the response's fields.
    ask: Any = None
    asked_by: Observer | None = None
    # The rows an ask's `picks` read of its answer (codec.skim.Picks), for
    # `answered`; None when the answer could not be read.
    picked: list[tuple[Any, ...]] | None = None
    # The memo entry whose fields these are, when the links left them as they are
    # (memo.RequestEntry): its rendered pieces make the line.
    entry: Any = None


@dataclass(frozen=True)
class Shared:
    """What the builder hands each link: the process's objects the core keeps."""

    metrics: Metrics
    topic_ids: TopicIds
    summary: SummaryOptions
    policy: HeaderPolicy


@dataclass
class Notice:
    """A warning line a link asks the request log's hooks to write (`event`, `fields`)."""

    event: str
    fields: dict[str, Any]


@dataclass
class Refusal:
    """A link's refusal of a request before it is forwarded: `reply` (a response body
    from the correlation id on; b"" closes the connection, as brokers do), and the
    warning line that says why."""

    reply: bytes
    notice: Notice


@dataclass
class Answer:
    """A link's answer in the broker's place: the reply (a response body from the
    correlation id on) and the line's response fields. `later`, when set, is work done
    on the event loop's next turn, once the reply is on its way (what is ready to
    forward goes first): given the connection's state then (None once it closed), it
    returns fields that join the others before the line is written."""

    reply: bytes
    fields: dict[str, Any]
    later: Callable[[ConnState | None], dict[str, Any]] | None = None


class Observer:
    """A link of the chain: a no-op base, as `Hooks` is. Each method is called only for
    the apis its set names, and only for a connection the request log's hooks know
    (`state`), after they decoded the frame and learnt the connection's identity from it."""

    # requests whose decoded form it reads (`request`)
    request_apis: frozenset[int] = frozenset()
    # requests whose per-(topic, partition) record stats it reads (`request`'s
    # partition_stats: made only when a link asks for them)
    partition_stats_apis: frozenset[int] = frozenset()
    # responses decoded whole that it reads (`response`)
    response_apis: frozenset[int] = frozenset()
    # requests it may answer in the broker's place (`answers`, `answer`): held until
    # whole and seen before forwarding
    answer_apis: frozenset[int] = frozenset()
    # ApiVersions entries ({"api_key", "min_version", "max_version"}) added to the
    # answers clients get
    added_api_versions: tuple[dict[str, int], ...] = ()
    # Of request_apis: those whose requests it reads without changing the token's fields
    # and whose answers it reads skimmed (an ask not `whole`), if at all: the C path
    # (proxy/steady.py) may take their memoised exchanges, calling `request` and
    # `answered` all the same.
    steady_apis: frozenset[int] = frozenset()
    # every decoded request is handed to `check` (as the connection's identity learns
    # from it: those a link answers too)
    checks_requests: bool = False
    # every request is held whole and handed to `admit` before it is forwarded
    inspects_requests: bool = False

    def new_state(self) -> Any:
        """Its own state of a connection that opens (kept in `ConnState.kept[self]`
        until it closes); None: it keeps none."""
        return None

    def check(self, info: ConnectionInfo, state: ConnState, request: Any) -> Notice | None:
        """With `checks_requests`: a request decoded (its identity learnt); a warning."""
        return None

    def check_key(self, state: ConnState) -> Any:
        """With `checks_requests`: what `check` reads of the connection besides the request
        and the identity (its own kept state), as a value compared with ==: a memoised
        request that passed with this key unchanged passes again, and is not checked
        again while it stays so (the request log's `ConnState.quiet`, which the C path
        reads). None: `check` must see every request (nothing is ever quiet)."""
        return None

    def admit(
        self, info: ConnectionInfo, state: ConnState, frame: memoryview, api_key: int, api_version: int,
        correlation_id: int,
    ) -> Refusal | None:
        """With `inspects_requests`: a request before it is forwarded (only its header is
        known good); a refusal, or None to let it go on."""
        return None

    def request(
        self,
        info: ConnectionInfo,
        state: ConnState,
        token: Token,
        request: Any,
        partition_stats: dict[tuple[str, int], Any] | None,
    ) -> None:
        """A request decoded, its line fields made (`token.fields`): add fields, or set
        `token.ask` (and `token.asked_by` to itself) for its response to be read against."""

    def response(
        self, info: ConnectionInfo, state: ConnState, pending: Pending, response: Response
    ) -> Notice | None:
        """A response decoded whole, before the connection's identity learns from it;
        a warning, if it has one."""
        return None

    def answered(
        self,
        info: ConnectionInfo,
        state: ConnState | None,
        token: Token,
        response: Response | None,
        fields: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The response to a request whose `token.ask` this link set: the line's response
        fields. When `ask.whole`, `response` is the response decoded whole and `fields`
        None; else `response` is None and `fields` those of the skimmed response (maybe
        memoised: copy before changing), or of a response that failed to decode, and an
        ask's `picks` (None, or the codec.skim.Picks of the fields of its answer it
        reads) have their rows, read in the skim, in `token.picked`. The dict
        returned is not changed afterwards: returned again, it is the same line fields
        (request_line.answer_json renders it once)."""
        return fields if fields is not None else {"errors": []}

    def answers(self, state: ConnState) -> bool:
        """Whether it answers this connection's requests of `answer_apis` itself."""
        return False

    def answer(self, info: ConnectionInfo, state: ConnState, token: Token, request: Any) -> Answer:
        """Answer a request (decoded, identity learnt from it) in the broker's place."""
        raise NotImplementedError

    def identity_changed(self, info: ConnectionInfo, state: ConnState) -> None:
        """The connection's identity changed (a client id, an instance id, a principal, a
        SASL mechanism); also once as it opens."""

    def connection_closed(self, info: ConnectionInfo, state: ConnState) -> None:
        """The connection closed (its state, `state.kept[self]` too, goes after this)."""

    def reopen_logs(self) -> None:
        """SIGHUP: reopen the files it writes to at their paths (must not block)."""

    def close(self) -> None:
        """The proxy stops: flush and close what it writes to."""
