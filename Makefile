# Developer shortcuts. The README's two commands do not need make.
PY ?= .venv/bin/python

.PHONY: generate test lint bench-codec

generate:  ## regenerate codec/generated and the Kafka 4.0 readiness table (sources: codec/generate.py)
	$(PY) -m codec.generate

test:
	$(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy
