"""Kafka 4.0's removed request versions (package data, from the codec generator)."""

from __future__ import annotations

import json
from pathlib import Path

# Next to this module in the source tree and in an installed package alike.
DATA_FILE = Path(__file__).with_name("data") / "kafka4_removed_versions.json"


def removed_versions() -> list[tuple[int, str, int, int]]:
    """(api_key, api, removed api_version, kafka4_min_version), one per removed version."""
    apis = json.loads(DATA_FILE.read_text(encoding="utf-8"))["apis"]
    return [(api["api_key"], api["api"], version, api["kafka4_min_version"])
            for api in apis for version in api["removed_versions"]]
