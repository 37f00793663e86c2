"""Forwarding: sockets, framing and the request/response exchange; knows nothing of what frames mean."""
