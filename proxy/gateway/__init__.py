"""Gateway mode: one listener per broker of a cluster, broker addresses rewritten in responses."""
