"""The KIP-1313 slice's config section, `kip1313:` in kafkalens.yaml: what a violation
of the client instance id rule does (log or reject), and the apis and versions that use
request header v3 beyond the KIP's own RPCs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from codec import HeaderPolicy
from codec.schema import api_names
from proxy.config.language import ConfigError, api_ref, choice, config_section, custom, show

ENFORCEMENTS = ("log", "reject")
_VERSION_SPEC = re.compile(r"^\s*(\d+)\s*(\+|-\s*(\d+))?\s*$")


@dataclass(frozen=True)
class HeaderV3Rule:
    """Request header v3 for `api` (a name like "Metadata" or a key) from `min_version`."""

    api: str | int
    min_version: int
    max_version: int | None = None  # None: every version from min_version on


def _header_v3(raw: object, key: str) -> tuple[HeaderV3Rule, ...]:
    if not isinstance(raw, dict):
        raise ConfigError(key, f"must be a mapping api: versions, got {show(raw)}")
    return tuple(_header_v3_rule(api, spec, f"{key}.{api}") for api, spec in raw.items())


def _header_v3_rule(api: object, spec: object, key: str) -> HeaderV3Rule:
    """`spec`: "3+" (3 and later), "3-5", "3" or 3."""
    name = api_ref(api, key)
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return HeaderV3Rule(name, spec, spec)
    match = _VERSION_SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ConfigError(key, f'must be versions like "3+", "3-5" or 3, got {spec!r}')
    low = int(match.group(1))
    if match.group(2) == "+":
        return HeaderV3Rule(name, low, None)
    high = int(match.group(3)) if match.group(3) else low
    if high < low:
        raise ConfigError(key, f"version range {spec!r} is empty")
    return HeaderV3Rule(name, low, high)


def _header_v3_yaml(rules: tuple[HeaderV3Rule, ...]) -> dict[object, object]:
    def versions(rule: HeaderV3Rule) -> object:
        if rule.max_version is None:
            return f"{rule.min_version}+"
        if rule.max_version == rule.min_version:
            return rule.min_version
        return f"{rule.min_version}-{rule.max_version}"

    return {rule.api: versions(rule) for rule in rules}

@config_section
class Kip1313Config:
    enforcement: str = choice(
        default="log",
        options=ENFORCEMENTS,
        doc="log (warning + counter) | reject (INVALID_REQUEST, error 42)",
    )
    header_v3: tuple[HeaderV3Rule, ...] = custom(
        parse=_header_v3,
        to_yaml=_header_v3_yaml,
        default=(),
        doc="(api, versions) that use request header v3 beyond the KIP's own three RPCs, for"
        " brokers that adopt it for every RPC. A version past the schema's newest reuses the"
        ' newest body. Example: {DeleteGroups: "3+", Metadata: "14+"}',
    )


def header_policy(rules: tuple[HeaderV3Rule, ...]) -> HeaderPolicy:
    """KIP-1313 header v3 declarations from the config (api names or keys)."""
    keys = {name: key for key, name in api_names().items()}
    declared: dict[int, int | tuple[int, int | None]] = {}
    for rule in rules:
        api_key = rule.api if isinstance(rule.api, int) else keys[rule.api]
        declared[api_key] = (rule.min_version, rule.max_version)
    return HeaderPolicy(header_v3=declared)
