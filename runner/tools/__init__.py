"""Tools: argument schemas and the registry, custom tools (the controller's side), dialects."""
