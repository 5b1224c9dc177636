"""Sandbox images, built offline from recipes in images/ and cached.

`runner/rootfs:bookworm` is a Debian root made by images/rootfs/build.sh (debootstrap) and
loaded with `docker import`; the other images are Dockerfiles FROM it. Each image carries a
label with the hash of its recipe, so a changed recipe is rebuilt and an unchanged one is not.

A Dockerfile recipe may hold `prepare.sh`: it runs on this machine with the build context (a
copy of the folder) as its argument, to put in what the Dockerfile COPYs (a wheel fetched with
the machine's own pip, the machine's node binary). Exit code 3 from prepare.sh means "cannot
be built here" (the reason on stderr): an optional recipe is then skipped, not failed.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import RunnerError

RECIPE_LABEL = "org.runner.recipe"
Progress = Callable[[str], None]


def images_dir() -> Path:
    return Path(os.environ.get("RUNNER_IMAGES_DIR") or Path(__file__).resolve().parents[2] / "images")


def cache_dir() -> Path:
    base = os.environ.get("RUNNER_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runner"
    return Path(base)


class CannotBuild(RunnerError):
    """A recipe's prepare.sh said this machine cannot build it (exit code 3)."""


@dataclass(frozen=True)
class Recipe:
    name: str  # repository:tag
    folder: str  # under images/
    kind: str  # "rootfs" (debootstrap + import) or "dockerfile"
    needs: str | None = None
    description: str = ""
    optional: bool = False  # skipped (with the reason) when its prepare.sh says it cannot be built here

    @property
    def path(self) -> Path:
        return images_dir() / self.folder

    def digest(self) -> str:
        """Hash of every file of the recipe (and of what it is built on)."""
        h = hashlib.sha256()
        for f in sorted(p for p in self.path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(self.path)).encode() + b"\0" + f.read_bytes() + b"\0")
        if self.needs:
            h.update(RECIPES[self.needs].digest().encode())
        return h.hexdigest()[:16]


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("runner/rootfs:bookworm", "rootfs", "rootfs", description="Debian bookworm root (debootstrap)"),
        Recipe("runner/base:latest", "base", "dockerfile", needs="runner/rootfs:bookworm",
               description="default sandbox: python3 (with lupa for Lua tools), bash, git, user runner (1000), "
                           "/workspace"),
        Recipe("runner/node:latest", "node", "dockerfile", needs="runner/base:latest", optional=True,
               description="runner/base plus this machine's node, for JS custom tools"),
    )
}


def resolve(name: str) -> Recipe:
    """'base', 'runner/base' or 'runner/base:latest' -> its recipe."""
    for candidate in (name, f"{name}:latest", f"runner/{name}", f"runner/{name}:latest"):
        if candidate in RECIPES:
            return RECIPES[candidate]
    raise KeyError(f"no recipe for image {name!r}; known: {', '.join(RECIPES)}")


def status(client, recipe: Recipe) -> tuple[str, dict | None]:
    """('missing' | 'stale' | 'ok', the image's {id, short_id, size} or None)."""
    from ..backends.docker_engine import image_state

    return image_state(client, recipe.name, RECIPE_LABEL, recipe.digest())


def build(client, name: str | None = None, force: bool = False, progress: Progress | None = None) -> list[str]:
    """Build `name` (default: every recipe) and what it needs, unless present and current.
    Returns the names built."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    targets = [resolve(name)] if name else list(RECIPES.values())
    built: list[str] = []
    checked: set[str] = set()
    for recipe in targets:
        try:
            _build_one(client, recipe, force, say, built, checked)
        except CannotBuild as e:
            if name or not recipe.optional:
                raise
            say(f"images: skipped {recipe.name} (optional): {e}")
    return built


def _build_one(client, recipe: Recipe, force: bool, say: Progress, built: list[str], checked: set[str]) -> None:
    if recipe.name in built or recipe.name in checked:
        return
    checked.add(recipe.name)
    if recipe.needs:
        _build_one(client, RECIPES[recipe.needs], False, say, built, checked)
    state, old = status(client, recipe)
    if state == "ok" and not force and not (recipe.needs and recipe.needs in built):
        say(f"images: {recipe.name} is up to date")
        return
    say(f"images: building {recipe.name} ({state})")
    if recipe.kind == "rootfs":
        _build_rootfs(client, recipe, say)
    else:
        _build_dockerfile(client, recipe, say)
    if old is not None:  # the replaced image is now untagged: drop it unless something uses it
        from ..backends.docker_engine import remove_image

        remove_image(client, old["id"])
    built.append(recipe.name)
    say(f"images: built {recipe.name}")


def _build_rootfs(client, recipe: Recipe, say: Progress) -> None:
    script = recipe.path / "build.sh"
    # The tarball depends on build.sh alone; import.conf changes only re-import it.
    tar_digest = hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    tarball = cache_dir() / f"rootfs-{recipe.name.split(':')[-1]}-{tar_digest}.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(["bash", str(script), str(tarball)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in proc.stdout:
            say("  " + line.rstrip())
        if proc.wait() != 0:
            raise RuntimeError(f"{script} failed with exit code {proc.returncode}; see the lines above")
    else:
        say(f"images: using cached {tarball}")
    conf = (recipe.path / "import.conf").read_text().splitlines()
    changes = [line for line in conf if line.strip() and not line.startswith("#")]
    changes.append(f"LABEL {RECIPE_LABEL}={recipe.digest()}")
    from ..backends.docker_engine import import_image

    import_image(client, str(tarball), recipe.name, changes)


def _prepare(recipe: Recipe, context: Path, say: Progress) -> None:
    """Copy the recipe folder into `context` and run its prepare.sh there, if it has one."""
    import shutil

    shutil.copytree(recipe.path, context, dirs_exist_ok=True)
    script = context / "prepare.sh"
    if not script.exists():
        return
    env = dict(os.environ, PYTHON=sys.executable, RUNNER_CACHE_DIR=str(cache_dir()))
    proc = subprocess.run(["bash", str(script), str(context)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in proc.stdout.splitlines():
        say("  " + line)
    if proc.returncode == 3:
        raise CannotBuild(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "prepare.sh exited 3")
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe.path / 'prepare.sh'} failed with exit code {proc.returncode}; see the lines above")


def _build_dockerfile(client, recipe: Recipe, say: Progress) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="runner-image-") as tmp:
        context = Path(tmp) / "context"
        _prepare(recipe, context, say)
        from ..backends.docker_engine import build_image

        build_image(client, str(context), recipe.name, {RECIPE_LABEL: recipe.digest()}, say)


def listing(client) -> list[dict]:
    rows = []
    for recipe in RECIPES.values():
        state, img = status(client, recipe)
        rows.append({
            "name": recipe.name, "state": state,
            "id": img["short_id"] if img else "",
            "size_mb": round(img["size"] / 1e6) if img else 0,
            "description": recipe.description, "optional": recipe.optional,
        })
    return rows
