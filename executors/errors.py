"""Errors of the executor layer, each with a message a person can act on."""


class ExecutorError(Exception):
    """Base of every executor error."""


class EngineUnavailable(ExecutorError):
    """The backend's engine (Docker daemon, SSH server) does not answer."""


class ImageNotFound(ExecutorError):
    """The requested image is not on the engine; runner never pulls silently."""


class SandboxGone(ExecutorError):
    """The sandbox died or was removed while in use."""


class InvalidConfig(ExecutorError):
    """A configuration value is refused (bad mount, unsafe option without force, ...)."""
