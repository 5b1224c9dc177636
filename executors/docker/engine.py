"""Connecting to a Docker engine, with errors that say what to do."""
from __future__ import annotations

from ..errors import EngineUnavailable, ImageNotFound

START_HINT = "start one with `make setup` (installs docker.io and starts dockerd) or `dockerd &`"


def import_docker(ssh: bool = False):
    """Import the Docker SDK without paramiko unless an ssh:// engine needs it.

    docker-py imports its SSH transport (and so paramiko, ~130 ms) eagerly but tolerates an
    ImportError there; `runner exec` against a local engine should not pay for it. When an
    ssh:// address comes later in the same process, the transport is loaded then.
    """
    import sys

    if "docker" not in sys.modules and not ssh and "paramiko" not in sys.modules:
        sys.modules["paramiko"] = None  # makes `import paramiko` raise ImportError
        try:
            import docker  # noqa: F401
        finally:
            del sys.modules["paramiko"]
    import docker
    import docker.api.client

    if ssh and not hasattr(docker.api.client, "SSHHTTPAdapter"):
        from docker.transport.sshconn import SSHHTTPAdapter

        docker.api.client.SSHHTTPAdapter = SSHHTTPAdapter
    return docker


def connect(base_url: str | None = None, timeout: int = 120):
    """A docker.DockerClient for base_url (unix://, tcp://, ssh://) or $DOCKER_HOST."""
    import os

    url = base_url or os.environ.get("DOCKER_HOST", "")
    docker = import_docker(ssh=url.startswith("ssh://"))
    from docker.errors import DockerException

    try:
        client = docker.DockerClient(base_url=base_url, timeout=timeout) if base_url else docker.from_env(timeout=timeout)
        if client.api.base_url.startswith("http+docker://"):
            # A unix socket (or npipe, or ssh): no proxy or .netrc applies, and requests looked
            # for both before every request, scanning the whole environment twice (getproxies)
            # and reading ~/.netrc: ~0.3 ms a request here, a fifth of the controller's CPU for a
            # per-call sandbox (twelve requests). A tcp:// engine keeps requests' defaults.
            client.api.trust_env = False
        client.ping()
    except DockerException as e:
        raise unavailable(base_url, e) from None
    except Exception as e:  # requests/paramiko errors for tcp:// and ssh:// addresses
        raise EngineUnavailable(f"no Docker engine answers at {base_url}: {_short(e)}") from None
    return client


def unavailable(base_url: str | None, e: Exception) -> EngineUnavailable:
    """The one line for an engine that does not answer at base_url (or $DOCKER_HOST, or the default)."""
    import os

    url = base_url or os.environ.get("DOCKER_HOST", "")
    where = base_url or (f"{url} ($DOCKER_HOST)" if url else "the local engine (/var/run/docker.sock)")
    return EngineUnavailable(f"no Docker engine answers at {where}: {START_HINT} ({_short(e)})")


_shared: dict = {}


def shared_client(base_url: str | None = None):
    """One client per engine address in this process, made (and pinged) once: a sandbox's start
    then pays neither a new connection pool nor a ping. docker-py's client is a requests
    session over a thread-safe connection pool, so executors on many threads may share it."""
    import os
    import threading

    key = (base_url or os.environ.get("DOCKER_HOST", ""), os.getpid())
    client = _shared.get(key)
    if client is None:
        with _shared.setdefault("lock", threading.Lock()):
            client = _shared.get(key)
            if client is None:
                client = _shared[key] = connect(base_url)
    return client


def require_image(client, image: str) -> None:
    """Raise ImageNotFound with how to get the image. Never pulls."""
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise image_missing(image) from None


def image_missing(image: str) -> ImageNotFound:
    """ImageNotFound saying how to get the image (runner never pulls)."""
    if image.startswith("runner/"):
        how = "build it with `runner images build` (or `make images`)"
    else:
        how = "load it with `docker load -i FILE` or build it with `docker build`"
    return ImageNotFound(f"image {image} is not on this engine: {how}; runner never pulls images")


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
