"""The repository as the exercises see it: its address and version, from pyproject.toml.

A release of the course is the git tag ``v<version>``. A notebook's setup cell installs
d2lhelpers at that tag, and a student copy's Open-in-Colab badge opens the copy at that tag, so
a copy handed out keeps working with the checks it was written for, whatever happens on main.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

__all__ = ["Project", "find_project"]

GITHUB = "https://github.com/"


@dataclass(frozen=True)
class Project:
    """root: the repository's folder; repository: its GitHub address; version: the package's."""

    root: Path
    repository: str
    version: str

    @property
    def tag(self) -> str:
        """The git tag of this version's release."""
        return f"v{self.version}"

    @property
    def requirement(self) -> str:
        """What pip installs: d2lhelpers at this version's tag."""
        return f"d2lhelpers @ git+{self.repository}@{self.tag}"

    def contains(self, path: Path) -> bool:
        return Path(path).resolve().is_relative_to(self.root)

    def colab_url(self, path: Path) -> str:
        """The Open-in-Colab address of the notebook at ``path`` (inside the repository), as
        released under this version's tag."""
        if not self.contains(path):
            raise ValueError(f"path must lie inside the repository {self.root}, got {path}")
        relative = Path(path).resolve().relative_to(self.root).as_posix()
        return (f"https://colab.research.google.com/github/{self.repository.removeprefix(GITHUB)}"
                f"/blob/{self.tag}/{relative}")


def find_project(start: Path) -> Project:
    """The project of the nearest pyproject.toml in ``start`` or a folder above it."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
            repository = project.get("urls", {}).get("Repository", "")
            if not repository.startswith(GITHUB):
                raise ValueError(f"{pyproject}: [project.urls] Repository must be a GitHub "
                                 f"address ({GITHUB}owner/name), got {repository!r}")
            return Project(folder, repository.rstrip("/"), project["version"])
    raise ValueError(f"start must lie in a project with a pyproject.toml, got {start}")
