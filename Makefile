# Developer shortcuts. The README's two commands do not need make.
PY ?= .venv/bin/python

.PHONY: generate test fast lint bench

generate:  ## regenerate codec/generated, the Kafka 4.0 readiness table (codec/generate.py) and config/kafkalens.yaml (proxy/config/)
	$(PY) -m codec.generate
	$(PY) -m proxy.config > config/kafkalens.yaml

test:
	$(PY) -m pytest

fast:  ## the developer's loop: the tests that need no broker, JVM or Go program, and are not slow
	$(PY) -m pytest -m fast

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy

bench:  ## the benchmarks, with the question each answers
	$(PY) -m bench
