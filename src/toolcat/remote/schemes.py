"""The implementation prefixes of tools that live elsewhere, kept apart from the clients so
that recognising one imports neither."""

MCP_PREFIX = "mcp+"  # mcp+stdio:COMMAND#tool, mcp+http:URL#tool
OPENAPI_PREFIX = "openapi+http:"  # openapi+http:BASE#PLAN
