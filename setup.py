"""The one compiled part of toolcat: BM25 upper bounds from quantized impacts, the first
stage of a BM25 query (search/native.py), and the saved index's first pass over the rows
(lexical_index.py). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "toolcat.search._impacts",
            ["src/toolcat/search/_impacts.c"],
            # Contributions computed as Python computes them: no fused multiply-adds.
            extra_compile_args=["-O2", "-ffp-contract=off", "-std=c99"],
            # Without a C compiler toolcat installs all the same: tantivy then ranks alone.
            optional=True,
        )
    ]
)
