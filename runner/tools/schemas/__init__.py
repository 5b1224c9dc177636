"""Tool schemas on the controller side: pydantic argument models, the registry of tool specs
and presets, and exports to the formats agents' APIs want (OpenAI, Anthropic, MCP)."""
