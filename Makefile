# Developer shortcuts. The README's two commands do not need make.
PY ?= .venv/bin/python

.PHONY: generate test lint bench-codec

generate:  ## regenerate codec/generated, the Kafka 4.0 readiness table (codec/generate.py) and config/kafkalens.yaml (proxy/config.py)
	$(PY) -m codec.generate
	$(PY) -m proxy.config > config/kafkalens.yaml

test:
	$(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy
