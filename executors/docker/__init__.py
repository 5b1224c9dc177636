"""Docker backend: hardened ephemeral containers through the Docker SDK."""
from .config import Mount, SandboxConfig
from .executor import DockerExecutor

__all__ = ["DockerExecutor", "Mount", "SandboxConfig"]
