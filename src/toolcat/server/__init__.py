"""The MCP face of the catalog (needs the ``mcp`` extra)."""
