"""Test helpers: a recording TCP relay, librdkafka's mock cluster, client workloads."""
