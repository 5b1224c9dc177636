"""Input from the workspace, the sandbox or a tenant, handled without trusting it: workspace
paths walked without following links, bounded JSON, text made safe to print."""
