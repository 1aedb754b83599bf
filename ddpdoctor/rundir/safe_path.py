"""Paths ddpdoctor writes: created relative to directory descriptors checked from the root down.

ddpdoctor often runs as root on hosts other users share.  A file written by name lands
wherever the name resolves at that moment: if another user can change a directory on the
way (its own directory, or one that anyone can write), it can swap the run dir for a link
after every check and have root write the report where it chose.  So every write here walks
its path from ``/`` one component at a time (``openat`` with ``O_NOFOLLOW``), and each
directory it passes must be root's or this user's and writable by nobody else, unless it is
sticky (``/tmp``: then only its owner or the entry's can rename the entry, and the entry
taken next is root's or this user's, checked in turn).  A symbolic link on the way is followed
only when it is root's or this user's.  The file is then created (``O_EXCL|O_NOFOLLOW``: a
link planted at its name is removed, never followed), renamed and unlinked relative to the
last directory's descriptor: nothing is resolved by name again after the check.  What fails
the check is an ``UnsafePath`` (an OSError) that says which directory and why.
"""

from __future__ import annotations

import errno
import functools
import grp
import os
import pwd
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # symbolic links followed in one path, as the kernel allows
PARENT_MODE = 0o755  # directories made on the way to one (the last one's mode is the caller's)


class UnsafePath(OSError):
    """A directory on the way to a file that another user could change (the message says
    which, and why)."""


@functools.lru_cache(maxsize=64)
def _private_group(gid: int) -> bool:
    """Is ``gid`` this user's own group (its primary group, with no other member listed)?"""
    if gid != os.getegid():
        return False
    try:
        members = grp.getgrgid(gid).gr_mem
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return True  # a group unknown to /etc/group lists nobody else
    return all(m == me for m in members)


def unsafe_dir(st: os.stat_result) -> str:
    """Why another user could change the entries of a directory with stat ``st`` ("" when
    nobody but root and this user can)."""
    me = os.geteuid()
    if st.st_uid not in (0, me):
        return f"belongs to uid {st.st_uid}"
    others = st.st_mode & stat.S_IWOTH or \
        (st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid))
    if others and not st.st_mode & stat.S_ISVTX:
        return f"can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _check(fd: int, shown: str) -> None:
    why = unsafe_dir(os.fstat(fd))
    if why:
        raise UnsafePath(errno.EPERM, f"{shown} {why}: another user could swap what is in it")


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _open_root() -> int:
    fd = os.open("/", _DIR_FLAGS)
    _check(fd, "/")
    return fd


def _follow(fd: int, name: str, shown: str) -> str | None:
    """The target of ``name`` in ``fd`` when it is a link that may be followed (root's or
    this user's); None when it is no link."""
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        return None
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafePath(errno.EPERM, f"{shown} is a link of uid {st.st_uid}: another user "
                         "chose where it leads")
    return os.readlink(name, dir_fd=fd)


def _walk(path: str | os.PathLike[str], create: bool, mode: int) -> int:
    """The checked descriptor of directory ``path`` (made, with its missing parents, when
    ``create``: the last with ``mode``)."""
    text = os.path.abspath(os.fspath(path))
    todo = _components(text)
    fd, shown, links = _open_root(), "", 0
    try:
        while todo:
            name = todo.pop(0)
            here = f"{shown}/{name}"
            try:
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create or name == "..":
                    raise
                try:
                    os.mkdir(name, mode if not todo else PARENT_MODE, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: checked below like any other
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _follow(fd, name, here)
                if target is None:
                    raise NotADirectoryError(errno.ENOTDIR, f"{here} is not a directory") \
                        from None
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, f"too many links on the way to {text}") from None
                todo[:0] = _components(target)
                if target.startswith("/"):
                    os.close(fd)
                    fd, shown = _open_root(), ""
                continue
            os.close(fd)
            fd = new
            shown = here if name != ".." else shown.rpartition("/")[0]
            _check(fd, shown or "/")
        return fd
    except BaseException:
        os.close(fd)
        raise


class CheckedDir:
    """A directory opened through checked descriptors; what it does with its entries is
    relative to its descriptor.  Close it (or use it in a ``with``)."""

    def __init__(self, path: str | os.PathLike[str], create: bool = False,
                 mode: int = 0o700):
        self.path = Path(path)
        self.fd = _walk(path, create, mode)

    def __enter__(self) -> "CheckedDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def open_new(self, name: str, flags: int = os.O_WRONLY) -> int:
        """A file created as ``name`` for this process alone (0600); a link or file planted
        at that name is removed (never followed) and the file made anew."""
        flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(name, flags, 0o600, dir_fd=self.fd)
        except FileExistsError:
            os.unlink(name, dir_fd=self.fd)  # a stale temporary file, or a planted link
            return os.open(name, flags, 0o600, dir_fd=self.fd)

    def open_append(self, name: str, create: bool = True, flags: int = 0) -> int:
        """``name`` opened to append (made 0600 when missing and ``create``); a link there
        is refused, never followed."""
        flags |= os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | \
            (os.O_CREAT if create else 0)
        return os.open(name, flags, 0o600, dir_fd=self.fd)

    def open_rw(self, name: str, create: bool = True) -> int:
        """``name`` opened read-write, not truncated (made 0600 when missing and ``create``);
        a link there is refused, and anything but a regular file."""
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC |
                     (os.O_CREAT if create else 0), 0o600, dir_fd=self.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, f"{self.path / name} is not a regular file")
        return fd

    def open_lock(self, name: str) -> int:
        """``name`` opened read-write (made 0600 when missing) to hold a lock on; no link."""
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=self.fd)

    def replace(self, src: str, dst: str) -> None:
        """Rename entry ``src`` to ``dst`` (replacing it) within this directory."""
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str, missing_ok: bool = True) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def names(self) -> list[str]:
        """The entries of this directory."""
        return os.listdir(self.fd)

    def subdir(self, name: str, create: bool = False, mode: int = 0o700) -> "CheckedDir":
        """Entry ``name``, a directory of its own (made with ``mode`` when missing and
        ``create``), checked like the ones before it."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not a plain name: {name!r}")
        return _child(self, name, create, mode)


def _child(parent: CheckedDir, name: str, create: bool, mode: int) -> CheckedDir:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent.fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, mode, dir_fd=parent.fd)
        except FileExistsError:
            pass
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent.fd)
    child = CheckedDir.__new__(CheckedDir)
    child.path, child.fd = parent.path / name, fd
    try:
        _check(fd, str(child.path))
    except BaseException:
        child.close()
        raise
    return child


def open_new(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> int:
    """A file created at ``path`` for this process alone (0600), in a checked directory."""
    path = Path(path)
    with CheckedDir(path.parent) as d:
        return d.open_new(path.name, flags)


def open_append(path: str | os.PathLike[str], create: bool = True, flags: int = 0) -> int:
    """``path`` opened to append (made 0600 when missing and ``create``), in a checked
    directory; a link at its name is refused."""
    path = Path(path)
    with CheckedDir(path.parent) as d:
        return d.open_append(path.name, create, flags)


def make_dirs(path: str | os.PathLike[str], mode: int = 0o700) -> None:
    """Directory ``path`` and its missing parents, every one on the way checked."""
    CheckedDir(path, create=True, mode=mode).close()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, sync: bool = True) -> None:
    """Write ``data`` to ``path`` (owner-only, 0600) via a temporary file renamed over it,
    both relative to the checked descriptor of its directory: never a half-written file,
    never a write through a link.  ``sync``: on disk before the rename (not for a view
    rewritten every moment)."""
    path = Path(path)
    tmp = f".{path.name}.{os.getpid()}.tmp"
    with CheckedDir(path.parent) as d:
        fd = d.open_new(tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            d.replace(tmp, path.name)
        except BaseException:
            try:
                d.unlink(tmp)
            except OSError:
                pass  # nothing to clean up
            raise

