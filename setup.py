"""Only the optional C accelerator of the codec's decoders (codec/_accel.c, see
codec/accel.py); everything else about the package is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found, the build goes
on without it and the codec decodes in pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "codec._accel",
            ["codec/_accel.c"],
            optional=True,
            extra_compile_args=["-Wall", "-Wextra"],
        )
    ]
)
