"""Copy a run dir to another node piece by piece: what changed since the last copy, as JSON.

``RunDirDelta`` (the sending node) reads its run dir's traces, stacks, dumps and logs and
returns what changed since its previous call: new and still-open records of every trace
ring (their header too), the new tail of append-only logs, and whole small files that
changed.  ``apply_delta`` (the receiving node) writes such a delta into a mirror dir whose
layout is a run dir's, so the analysis reads the mirror exactly as it reads the original.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from ddpdoctor.rundir.layout import open_new
from ddpdoctor.trace import layout as L

APPEND_ONLY = (".jsonl",)  # logs that only grow: sent from where the last copy ended
WHOLE_FILES = ("run.json",)
DIRS = ("traces", "stacks", "flight_recorder")
MAX_FILE_BYTES = 4 << 20  # a bigger stack or dump file is not copied
MAX_RECORDS = 4096  # records of one ring per delta (a backlog beyond it: the newest)
MAX_OPEN = 512  # open records re-sent until they close
MAX_MIRROR_FILE_BYTES = 256 << 20  # a mirrored log or file grows no further
MAX_MIRROR_ENTRIES = 4096  # files a mirror dir takes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


class RunDirDelta:
    """The sending side: remembers what it sent of ``run_dir``."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.sent_count: dict[str, int] = {}  # ring -> records sent below this index
        self.open: dict[str, set[int]] = {}  # ring -> indices sent while still open
        self.sent_size: dict[str, int] = {}  # append-only file -> bytes sent
        self.sent_stamp: dict[str, tuple[int, int]] = {}  # whole file -> (size, mtime)

    def _files(self) -> list[tuple[str, Path]]:
        out = [(name, self.run_dir / name) for name in WHOLE_FILES + ("supervisor.jsonl",)]
        for d in DIRS:
            try:
                entries = sorted(os.listdir(self.run_dir / d))
            except OSError:
                continue
            out += [(f"{d}/{e}", self.run_dir / d / e) for e in entries
                    if not e.endswith(".tmp") and not e.startswith(".")]
        return out

    def collect(self) -> dict[str, Any]:
        """What changed since the last call: {"rings": [...], "files": [...]}."""
        rings, files = [], []
        for name, path in self._files():
            try:
                if name.endswith(".ring"):
                    ring = self._ring(name, path)
                    if ring is not None:
                        rings.append(ring)
                elif name.endswith(APPEND_ONLY):
                    part = self._tail(name, path)
                    if part is not None:
                        files.append(part)
                else:
                    whole = self._whole(name, path)
                    if whole is not None:
                        files.append(whole)
            except OSError:
                continue  # vanished or unreadable now: the next call tries again
        return {"rings": rings, "files": files}

    def _ring(self, name: str, path: Path) -> dict[str, Any] | None:
        with open(path, "rb") as f:
            head = f.read(L.HEADER_SIZE)
            if len(head) < L.HEADER_SIZE or head[:8] != L.MAGIC:
                return None
            fields = L.HEADER.unpack_from(head, 0)
            capacity, count = fields[3], fields[12]
            start = max(self.sent_count.get(name, 0), count - min(capacity, MAX_RECORDS))
            wanted = sorted(i for i in self.open.get(name, ()) if i < start and
                            i >= count - capacity) + list(range(start, count))
            records = []
            still_open = set()
            for index in wanted:
                f.seek(L.HEADER_SIZE + (index % capacity) * L.RECORD_SIZE)
                raw = f.read(L.RECORD_SIZE)
                if len(raw) < L.RECORD_SIZE:
                    break
                fields = L.RECORD.unpack_from(raw, 0)
                commit, t_end = fields[0], fields[8]
                if commit != index + 1:
                    if index >= start and len(still_open) < MAX_OPEN:
                        still_open.add(index)  # being written: send it next time
                    continue
                if t_end == 0 and len(still_open) < MAX_OPEN:
                    still_open.add(index)
                records.append([index, _b64(raw)])
        self.open[name] = still_open
        self.sent_count[name] = count
        return {"name": name, "capacity": capacity, "header": _b64(head[:L.HEADER_USED]),
                "records": records}

    def _tail(self, name: str, path: Path) -> dict[str, Any] | None:
        size = os.path.getsize(path)
        sent = self.sent_size.get(name, 0)
        if size <= sent:
            return None
        with open(path, "rb") as f:
            f.seek(sent)
            data = f.read(min(size - sent, MAX_FILE_BYTES))
        cut = data.rfind(b"\n") + 1  # whole lines only
        if cut == 0:
            return None
        self.sent_size[name] = sent + cut
        return {"name": name, "offset": sent, "data": _b64(data[:cut])}

    def _whole(self, name: str, path: Path) -> dict[str, Any] | None:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        if self.sent_stamp.get(name) == stamp or st.st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
        self.sent_stamp[name] = stamp
        return {"name": name, "data": _b64(data)}


def split_delta(delta: dict[str, Any], budget: int) -> list[dict[str, Any]]:
    """``delta`` cut into deltas of about ``budget`` bytes of JSON each (a ring or a file is
    never cut: each is far smaller), in order; always at least one."""
    parts: list[dict[str, Any]] = [{"rings": [], "files": []}]
    size = 0
    for kind in ("rings", "files"):
        for entry in delta.get(kind) or []:
            cost = len(json.dumps(entry))
            if size and size + cost > budget:
                parts.append({"rings": [], "files": []})
                size = 0
            parts[-1][kind].append(entry)
            size += cost
    return parts


def _safe(mirror: Path, name: str) -> Path | None:
    """The mirror path for a sent name, or None when the name leaves the mirror."""
    parts = Path(name).parts
    if not parts or any(p in ("..", "") or p.startswith("/") for p in parts) or \
            (len(parts) > 1 and parts[0] not in DIRS) or len(parts) > 2:
        return None
    return mirror.joinpath(*parts)


def apply_delta(mirror: Path, delta: dict[str, Any]) -> list[str]:
    """Write a delta into ``mirror`` (created as needed); returns problems, one line each."""
    problems: list[str] = []
    for d in DIRS:
        (mirror / d).mkdir(parents=True, exist_ok=True)
    for ring in delta.get("rings") or []:
        try:
            _apply_ring(mirror, ring)
        except (KeyError, TypeError, ValueError, OSError) as e:
            problems.append(f"mirror of {ring.get('name')!r}: {type(e).__name__}: {e}")
    for part in delta.get("files") or []:
        try:
            _apply_file(mirror, part)
        except (KeyError, TypeError, ValueError, OSError) as e:
            problems.append(f"mirror of {part.get('name')!r}: {type(e).__name__}: {e}")
    return problems


def _apply_ring(mirror: Path, ring: dict[str, Any]) -> None:
    path = _safe(mirror, ring["name"])
    capacity = int(ring["capacity"])
    if path is None or not 0 < capacity <= L.DEFAULT_CAPACITY:  # a real rank's ring at most
        raise ValueError("bad ring name or capacity")
    size = L.HEADER_SIZE + capacity * L.RECORD_SIZE
    new = not path.exists()  # built under a temporary name: no reader sees it headerless
    if new:
        _room_for_one_more(path)
    target, path = path, path.with_name(f".{path.name}.tmp") if new else path
    fd = open_new(path, os.O_RDWR) if new else os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)  # sparse: only written slots take room
        for index, raw in ring.get("records") or []:
            data = _unb64(raw)
            if len(data) == L.RECORD_SIZE and isinstance(index, int) and index >= 0:
                os.pwrite(fd, data, L.HEADER_SIZE + (index % capacity) * L.RECORD_SIZE)
        head = _unb64(ring["header"])
        if head[:8] != L.MAGIC or len(head) > L.HEADER_SIZE:
            raise ValueError("not a trace header")
        os.pwrite(fd, head, 0)  # last: the count never runs ahead of the records
    finally:
        os.close(fd)
    if new:
        os.replace(path, target)


def _apply_file(mirror: Path, part: dict[str, Any]) -> None:
    path = _safe(mirror, part["name"])
    if path is None:
        raise ValueError("bad file name")
    data = _unb64(part["data"])
    offset = int(part.get("offset", 0))
    if not 0 <= offset <= MAX_MIRROR_FILE_BYTES - len(data):
        raise ValueError(f"the mirror would pass {MAX_MIRROR_FILE_BYTES >> 20} MiB")
    if not path.exists():
        _room_for_one_more(path)
    if "offset" in part:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    with os.fdopen(open_new(tmp), "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _room_for_one_more(path: Path) -> None:
    """Raise ValueError when ``path``'s mirror dir already holds MAX_MIRROR_ENTRIES files."""
    try:
        count = len(os.listdir(path.parent))
    except OSError:
        return
    if count >= MAX_MIRROR_ENTRIES:
        raise ValueError(f"the mirror dir already holds {count} files")
