"""toolcat's compiled parts, both optional (Python does the same work where they were not
built): BM25 upper bounds from quantized impacts, the first stage of a BM25 query
(search/native.py) and the saved index's first pass over the rows (lexical_index.py); and
the words and index terms of ASCII text (text/tokenize.py); walks over JSON trees
(definitions/walks.py); a file patched to another's bytes (store/pages.py). Everything
else is in
pyproject.toml."""

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
        ),
        Extension(
            "toolcat.definitions._walks",
            ["src/toolcat/definitions/_walks.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
        Extension(
            "toolcat.store._pages",
            ["src/toolcat/store/_pages.c"],
            extra_compile_args=["-O2", "-std=c99", "-D_FILE_OFFSET_BITS=64"],
            optional=True,
        ),
        Extension(
            "toolcat.text._words",
            ["src/toolcat/text/_words.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ]
)
