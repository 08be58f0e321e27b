"""MCP servers as tools: the connection pool, pydantic-ai's toolset as the pool uses it, the admin's commands."""
