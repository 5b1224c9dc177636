from .fixtures import swarm_cluster  # noqa: F401
