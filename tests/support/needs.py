"""What a fixture needs beyond Python, declared where the fixture is: `@needs("broker")`
under `@pytest.fixture` on a fixture that starts tansu, `@needs("broker", "java")` on one
that starts Apache Kafka. tests/conftest.py gives every test that uses such a fixture,
directly or through another fixture, those markers (registered in pyproject.toml), so a
new test is marked by the fixtures it asks for; a test that starts a peer itself carries
the marker itself (`@pytest.mark.broker`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "kafkalens_needs"


def needs(*markers: str) -> Callable[[F], F]:
    def declare(func: F) -> F:
        setattr(func, ATTRIBUTE, tuple(markers))
        return func

    return declare


def declared(func: object) -> tuple[str, ...]:
    """The markers `func` (a fixture's function) was declared to need."""
    return tuple(getattr(func, ATTRIBUTE, ()))
