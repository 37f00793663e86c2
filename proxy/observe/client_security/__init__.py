"""What clients secure their connections with: open connections by TLS version and
SASL mechanism (and client software), a feature built by ARCHITECTURE.md's steps
("Add a feature"): config.py, metrics.py, link.py, feature.py."""
