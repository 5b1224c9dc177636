"""The controller's call path: Runner, its sessions, sandboxes, the agent's channel and lent
shells, the output store, and the bundle that ships the agent."""
