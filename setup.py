"""Build the optional compiled batch assembly; everything else is in pyproject.toml."""

import numpy
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamseq.gather._gather",
            ["streamseq/gather/_gather.c"],
            include_dirs=[numpy.get_include()],
            optional=True,  # without a compiler streamseq runs its numpy path
        )
    ]
)
