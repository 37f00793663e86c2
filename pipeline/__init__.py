"""kafkalens pipeline: Spark jobs over the proxy's JSON request log.

`report` is a batch job (Parquet tables + report.html); `watch` is a Structured
Streaming job over a log directory as the proxy writes and rotates it.
"""
