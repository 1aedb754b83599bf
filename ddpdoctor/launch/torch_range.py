"""The torch releases ddpdoctor supports, and one notice when a run's torch is another."""

from __future__ import annotations

from importlib import metadata

# First and last supported minor release, both included: pyproject.toml's torch requirement
# and docs/torch-versions.md say the same (a unit test holds them together).
OLDEST = (2, 11)
NEWEST = (2, 15)


def minor_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``2.15.0+cu132`` or ``2.16.0.dev20261101``;
    None when it does not start with two numbers."""
    parts = version.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def supported(version: str) -> bool:
    """Is ``version`` inside the supported range?  (An unreadable one is given the benefit.)"""
    minor = minor_of(version)
    return minor is None or OLDEST <= minor <= NEWEST


def installed_torch() -> str | None:
    """The torch version installed beside ddpdoctor, read from its metadata (no import)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def range_text() -> str:
    return f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


def torch_notice(version: str | None = None) -> str | None:
    """One line when the run's torch is outside the supported range: the job runs on, and
    what ddpdoctor reads of torch's internals may be missing."""
    version = version if version is not None else installed_torch()
    if version is None or supported(version):
        return None
    return (f"torch {version} is outside the releases ddpdoctor supports ({range_text()}); "
            "the job runs as usual, but some of what ddpdoctor records may be missing "
            "(see docs/torch-versions.md)")
