"""Only the optional C parts: the codec's interpreter (codec/_accel.c, see codec/accel.py)
and a connection's steady state (proxy/_steady.c, see proxy/steady.py); everything else
about the package is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found, the build goes
on without them: the codec decodes with its Python interpreter, and every read takes
the Python path.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "codec._accel",
            ["codec/_accel.c"],
            # the numbering it shares with codec/kinds.py (python -m codec.generate)
            depends=["codec/generated/kinds.h"],
            optional=True,
            extra_compile_args=["-Wall", "-Wextra"],
        ),
        Extension(
            "proxy._steady",
            ["proxy/_steady.c"],
            optional=True,
            extra_compile_args=["-Wall", "-Wextra"],
        ),
    ]
)
