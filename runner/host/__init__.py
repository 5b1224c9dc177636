"""The host side: `runner host-shell` and the routed host commands over SSH."""
