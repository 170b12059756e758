"""The MCP server (``mnemoflow mcp``): the agent tools over stdio or streamable HTTP. Needs the ``mcp`` extra."""
