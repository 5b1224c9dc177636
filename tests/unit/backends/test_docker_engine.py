"""The docker backend's standard-library half (runner/backends/docker_engine.py): `runner exec`,
its detached runs and `runner images` reach the engine through it, and importing it (with the
package runner/backends it sits in) loads neither pydantic nor the Docker SDK."""
from __future__ import annotations

import subprocess
import sys

from runner import backends


def test_runner_exec_and_its_detached_runs_load_neither_pydantic_nor_the_sdk():
    code = ("import sys\n"
            "from runner.cli import detached, exec_cmd\n"
            "from runner.backends import docker_engine\n"
            "cfg = exec_cmd.plain_config(exec_cmd.ExecOptions(cmd=['true'], env=['A=1'], memory='64m'))\n"
            "assert cfg.image == 'runner/base:latest' and cfg.env == {'A': '1'} and cfg.limits.memory == 64 << 20\n"
            "print(sorted(m for m in ('pydantic', 'docker', 'yaml', 'pkgutil') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


def test_it_is_no_backend_and_the_packages_base_names_still_resolve():
    assert "docker_engine" not in backends.names()
    from runner.backends.base import BackendConfig, Placement, Setting, ToolFolder

    assert (backends.BackendConfig, backends.Placement, backends.Setting, backends.ToolFolder) == (
        BackendConfig, Placement, Setting, ToolFolder)
