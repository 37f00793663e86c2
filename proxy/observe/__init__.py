"""Observation: decoding what passes, the request log, identities; nothing here does I/O on the Kafka path."""
