"""toolcat's version, as its MCP server and client announce it (``toolcat.__version__``)."""

__version__ = "0.1.0"
