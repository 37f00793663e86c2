"""What the proxy costs and how it holds up: the suite against tansu (`run`), kafkalens beside
the other proxies in front of Apache Kafka (`versus`), the hot path's instruction counts, and
the long runs (soak, faults, work in flight). `python -m bench` lists them."""
