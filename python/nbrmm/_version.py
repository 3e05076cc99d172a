import importlib.resources as _resources

# The one place the version is written: the package metadata reads it from this line
# (pyproject.toml, [tool.scikit-build.metadata.version]).
__version__ = "0.1.0"


def _read_git_commit() -> str:
    """The commit the package was built from (written at build time; empty when unknown)."""
    try:
        return _resources.files(__package__).joinpath("GIT_COMMIT").read_text().strip()
    except (FileNotFoundError, OSError):
        return ""


__git_commit__ = _read_git_commit()
