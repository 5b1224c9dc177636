"""Servers and integrations: `runner serve`, `runner mcp`, the inspect_ai sandbox provider."""
