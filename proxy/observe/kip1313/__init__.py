"""KIP-1313: a connection whose first request used request header v3 is held to the
client instance id it gave (config.py: the section; feature.py: its registration)."""
