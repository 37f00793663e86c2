# The C decoder interpreter (codec/_accel.c); see codec/accel.py.
from typing import Any

class Decoder:
    def __call__(
        self, buf: memoryview, pos: int, end: int, budget: list[int]
    ) -> tuple[dict[str, Any], int]: ...

def make_decoder(program: tuple[Any, ...], fallback: Any, helpers: tuple[Any, ...], name: str) -> Decoder: ...
