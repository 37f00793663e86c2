"""Who is on a connection: client id, software, instance id, members, principal.

Filled from what the connection's own messages say (KIP-511 ApiVersions, KIP-1313
request header v3, KIP-714 telemetry bodies, group messages, SASL), never from other
connections.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from codec import ApiKey, Request, Response
from codec.sasl import sasl_principal
from proxy.config import MAX_STRING_LENGTH
from proxy.observe.summary import clean

# Plain ints named by ApiKey: an int compared with an IntEnum member misses CPython's
# int fast path (proxy/exchange/kafka.py says what it cost).
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
API_VERSIONS = int(ApiKey.API_VERSIONS)
GET_TELEMETRY_SUBSCRIPTIONS = int(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
PUSH_TELEMETRY = int(ApiKey.PUSH_TELEMETRY)
ZERO_UUID = UUID(int=0)
MAX_MEMBER_IDS = 32


def kafka_uuid_text(value: UUID) -> str:
    """A client instance id as Kafka writes every Uuid (`Uuid.toString()`: the 16 bytes
    in URL-safe base64, no padding, 22 characters): what the Java client's
    `clientInstanceId()`, its logs, the broker and `kafka-client-metrics.sh` show, so
    an id read in any of them is found in the request log as it is."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def kafka_uuid(text: str) -> UUID:
    """The Uuid `kafka_uuid_text` wrote."""
    return UUID(bytes=base64.urlsafe_b64decode(text + "=="))


@dataclass
class Identity:
    """The identity fields every request log line carries, plus what the connection saw."""

    max_string_length: int = MAX_STRING_LENGTH
    client_id: str | None = None
    client_instance_id: str | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    principal: str | None = None
    sasl_mechanism: str | None = None
    member_ids: list[str] = field(default_factory=list)
    # The first non-zero client instance id its request headers gave (KIP-1313's v3)
    header_id: UUID | None = None

    def log_fields(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_instance_id": self.client_instance_id,
            "client_software_name": self.client_software_name,
            "client_software_version": self.client_software_version,
            "principal": self.principal,
        }

    def as_json(self) -> dict[str, Any]:
        return {**self.log_fields(), "sasl_mechanism": self.sasl_mechanism, "member_ids": self.member_ids}

    def _clean(self, value: Any) -> Any:
        return clean(value, self.max_string_length)

    def observe_request(self, request: Request) -> bool:
        """Update from a request; True if the software name/version became known."""
        header = request.header
        if self.client_id is None and header.get("client_id") is not None:
            # KIP-1313: later requests may carry a null client id; the first one counts.
            self.client_id = self._clean(header["client_id"])
        instance = header.get("client_instance_id")
        if instance is not None and instance != ZERO_UUID and self.client_instance_id is None:
            self.client_instance_id = kafka_uuid_text(instance)
        body = request.body
        self._observe_member(body)
        if request.api_key in (GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY):
            self._observe_instance(body.get("client_instance_id"))
        elif request.api_key == SASL_HANDSHAKE:
            self.sasl_mechanism = self._clean(body.get("mechanism"))
        elif request.api_key == SASL_AUTHENTICATE:
            self.observe_sasl_token(body.get("auth_bytes"))
        elif request.api_key == API_VERSIONS and body.get("client_software_name"):
            changed = self.client_software_name is None
            self.client_software_name = self._clean(body["client_software_name"])
            self.client_software_version = self._clean(body.get("client_software_version"))
            return changed
        return False

    def note_header_id(self, header_id: UUID | None) -> None:
        """A request header's client instance id (v3): the first non-zero one is kept."""
        if self.header_id is None and header_id is not None and header_id != ZERO_UUID:
            self.header_id = header_id

    def observe_unknown_request(self, frame: memoryview | bytes) -> bool:
        """A request of an api or version the codec does not know: its client id still
        comes right after the api key, version and correlation id (request headers v1
        and v2 both begin with it; v0, ControlledShutdown v0's, is long gone). True if it
        became known."""
        if self.client_id is not None or len(frame) < 10:
            return False
        size = int.from_bytes(frame[8:10], "big", signed=True)
        if size < 0 or len(frame) < 10 + size:
            return False
        self.client_id = self._clean(bytes(frame[10 : 10 + size]).decode("utf-8", "replace"))
        return True

    def observe_response(self, response: Response) -> None:
        body = response.body
        if response.api_key == GET_TELEMETRY_SUBSCRIPTIONS:
            # KIP-714 v0: the broker assigns the id when the client sent zero.
            self._observe_instance(body.get("client_instance_id"))
        self._observe_member(body)

    def observe_sasl_token(self, token: Any) -> None:
        if token is not None and self.sasl_mechanism and self.principal is None:
            self.principal = sasl_principal(self.sasl_mechanism, token)

    def observe_instance(self, instance: UUID | None) -> None:
        """An id the proxy itself assigned (collect mode), as a broker's answer would."""
        self._observe_instance(instance)

    def _observe_instance(self, instance: UUID | None) -> None:
        if instance is not None and instance != ZERO_UUID and self.client_instance_id is None:
            self.client_instance_id = kafka_uuid_text(instance)

    def _observe_member(self, body: dict[str, Any]) -> None:
        member = body.get("member_id")
        if member and member not in self.member_ids and len(self.member_ids) < MAX_MEMBER_IDS:
            self.member_ids.append(self._clean(member))
