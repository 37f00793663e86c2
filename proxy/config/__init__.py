"""kafkalens.yaml's bottom layer: the config language (language.py: how a key is
declared, read and checked), the core's sections (core.py) and the reader and writer of
a whole file (file.py). The names most rooms use are importable from here. Each
feature declares its section in its own package, and proxy/features.py puts the whole
file together (`Config`, `parse_config`, `load_config`, `documented_file`).

Adding a key is one field in its section plus its use, then regenerating the file
(`python -m proxy.config > config/kafkalens.yaml`):

    max_share_groups: int = integer(
        default=1000, at_most=(100_000, "each share group is a time series"),
        doc="Share groups with their own series; later ones count under group=\\"other\\".",
    )

A new section is a new `@config_section` dataclass and one `section(...)` field in its
parent (a feature's: ARCHITECTURE.md, "Add a feature"); a cross-key check is the
section's `_check`. Command-line flags are applied on top of the file through
`Overrides`.
"""

from proxy.config.core import (
    AUTO_MAX_CONNECTIONS,
    DEFAULT_LISTENER,
    MAX_STRING_LENGTH,
    CoreConfig,
    Limits,
    ListenerConfig,
    ListenerTLS,
    LogConfig,
    MetricsConfig,
    RequestLogConfig,
    UpstreamTLS,
)
from proxy.config.file import Overrides
from proxy.config.language import (
    INT32_MAX,
    Address,
    ConfigError,
    generic_key,
    parse_address,
    parse_duration,
    parse_size,
    readable_file,
)

__all__ = [
    "AUTO_MAX_CONNECTIONS", "DEFAULT_LISTENER", "INT32_MAX", "MAX_STRING_LENGTH", "Address", "ConfigError",
    "CoreConfig", "Limits", "ListenerConfig", "ListenerTLS", "LogConfig", "MetricsConfig", "Overrides",
    "RequestLogConfig", "UpstreamTLS", "generic_key", "parse_address", "parse_duration", "parse_size",
    "readable_file",
]  # fmt: skip
