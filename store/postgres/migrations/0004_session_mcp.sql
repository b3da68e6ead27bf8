-- A session's own MCP servers (store.MCPServer list, JSON), NULL for none.
ALTER TABLE sessions ADD COLUMN mcp_servers jsonb;
