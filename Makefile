# Developer shortcuts. The README's two commands do not need make.
PY ?= .venv/bin/python

.PHONY: generate test fast lint bench docs

generate:  ## regenerate codec/generated, the Kafka 4.0 readiness table (codec/generate.py), config/kafkalens.yaml (proxy/config/) and the site's reference pages (proxy/reference.py)
	$(PY) -m codec.generate
	$(PY) -m proxy.config > config/kafkalens.yaml
	$(PY) -m proxy.reference

test:
	$(PY) -m pytest

fast:  ## the developer's loop: the tests that need no broker, JVM or Go program, and are not slow
	$(PY) -m pytest -m fast

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy

bench:  ## the benchmarks, with the question each answers
	$(PY) -m bench

docs:  ## the documentation site, in site/ (site/index.html); a broken link or anchor fails it
	$(PY) -m sphinx -W --keep-going -b html -c docs . site
