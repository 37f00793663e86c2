"""Only the optional C interpreter of the codec (codec/_accel.c, see codec/accel.py);
everything else about the package is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found, the build goes
on without it and the codec decodes with its Python interpreter.
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
        )
    ]
)
