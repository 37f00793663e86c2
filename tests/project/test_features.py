"""The features as proxy/features.py registers them: one field of Config a feature,
named as the feature; its link in the chain in the order of the fields; and its metrics
on /metrics whether the feature is on or off (an operator's dashboards and alerts find
the same families either way)."""

from __future__ import annotations

from pathlib import Path

from proxy.config.language import declared
from proxy.features import FEATURES, Config, build_hooks, parse_config, proxy_metrics
from proxy.observe.feature import Feature

ALL_OFF = {
    "lag": {"enabled": False},
    "telemetry": {"observe": False, "collect": False},
    "client_security": {"enabled": False},
}


def test_each_feature_is_one_field_of_config_named_as_the_feature() -> None:
    owned = {name: key.owner for name, (_f, key) in declared(Config).items() if isinstance(key.owner, Feature)}
    assert list(owned.values()) == list(FEATURES)
    assert all(feature.name == name for name, feature in owned.items())
    assert {f.name for f in FEATURES} >= {"gateway", "kip1313", "telemetry", "lag", "client_security"}


def test_the_chain_is_in_the_order_of_the_features(tmp_path: Path) -> None:
    config = parse_config({"request_log": {"path": str(tmp_path / "requests.log")}})
    hooks = build_hooks(config, proxy_metrics(config))
    try:
        built = [type(link).__module__.split(".")[2] for link in hooks.links]
    finally:
        hooks.close()
    with_links = [f.name for f in FEATURES if f.link is not None and f.name != "gateway"]
    assert built == with_links == ["kip1313", "telemetry", "lag", "client_security"]


def test_every_features_metrics_are_there_whether_it_is_on_or_off(tmp_path: Path) -> None:
    def families(data: dict[str, object]) -> set[str]:
        config = parse_config({**data, "request_log": {"path": str(tmp_path / "requests.log")}})
        metrics = proxy_metrics(config)
        build_hooks(config, metrics).close()
        return {family.name for family in metrics.registry.collect()}

    on, off = families({}), families(ALL_OFF)
    assert on == off
    assert {"kafkalens_consumer_lag_records", "kafkalens_telemetry_pushes", "kafkalens_kip1313_violations",
            "kafkalens_gateway_routes", "kafkalens_client_security_connections"} <= on  # fmt: skip
