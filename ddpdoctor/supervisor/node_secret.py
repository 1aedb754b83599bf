"""The secret a many-node job's supervisors share: from the environment or a file, not derived.

Every node of a ``run --nnodes N`` (N > 1) is given the same secret, in
``DDPDOCTOR_STORE_SECRET`` or in a file named by ``--node-secret-file`` (a regular file of
this user that nobody else can read or write).  Nothing public (addresses, ids, the command
line) goes into it: whoever lacks it cannot join the nodes' channel nor seal a message.
Without one the run stops before it starts (a one-line error that shows how to make one),
unless the user accepted an unauthenticated channel (``--insecure-node-channel``): the
channel's key is then a constant anyone knows, and every node says so.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.supervisor.node_auth import SECRET_ENV, make_secret_hint, secret_problem

INSECURE_KEY = "ddpdoctor-unauthenticated-node-channel"  # known to everyone, on purpose
MAX_SECRET_FILE_BYTES = 4096
EXIT_USAGE = 2


@dataclass(frozen=True)
class NodeSecret:
    """The key the nodes' channel and messages use, and where it came from."""

    value: str
    source: str  # "DDPDOCTOR_STORE_SECRET", "--node-secret-file PATH" or "insecure"

    @property
    def insecure(self) -> bool:
        return self.source == "insecure"


def read_secret_file(path: Path) -> str:
    """The secret in ``path``: a regular file (no symlink) of this user, closed to others;
    a UserError otherwise."""
    where = f"--node-secret-file {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise UserError(f"cannot read {where}: {e.strerror or e}", EXIT_USAGE) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{where} is not a regular file", EXIT_USAGE)
        if st.st_uid != os.geteuid():
            raise UserError(f"{where} belongs to uid {st.st_uid}, not to this user "
                            f"(uid {os.geteuid()})", EXIT_USAGE)
        if st.st_mode & 0o077:
            raise UserError(f"{where} is open to others (mode {stat.S_IMODE(st.st_mode):o}); "
                            f"chmod 600 {path}", EXIT_USAGE)
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise UserError(f"{where} is larger than {MAX_SECRET_FILE_BYTES} bytes", EXIT_USAGE)
    return data.decode("utf-8", "replace").strip()


def node_secret(secret_file: Path | None, insecure: bool) -> NodeSecret:
    """The secret of a many-node run, checked before anything starts; a UserError (exit 2)
    that says how to make one when there is none."""
    if secret_file is not None:
        value, source = read_secret_file(secret_file), f"--node-secret-file {secret_file}"
    else:
        value, source = os.environ.get(SECRET_ENV, "").strip(), SECRET_ENV
    if value:
        problem = secret_problem(value, source)
        if problem:
            raise UserError(f"{problem}: {make_secret_hint()}", EXIT_USAGE)
        return NodeSecret(value, source)
    if insecure:
        return NodeSecret(INSECURE_KEY, "insecure")
    raise UserError(f"a many-node run needs a secret shared by its nodes: {make_secret_hint()} "
                    "(or --node-secret-file PATH, mode 600); --insecure-node-channel lets "
                    "anyone who reaches node 0's port speak for any node", EXIT_USAGE)


INSECURE_WARNING = ("--insecure-node-channel: the nodes' channel has no secret; anyone who "
                    "can reach node 0's port can join it, read what the nodes send and stop "
                    "the job")
