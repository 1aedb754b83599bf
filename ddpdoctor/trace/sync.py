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

from ddpdoctor.rundir.bounded import BadInput, open_regular, read_file
from ddpdoctor.rundir.safe_path import CheckedDir
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.text import clean

APPEND_ONLY = (".jsonl",)  # logs that only grow: sent from where the last copy ended
WHOLE_FILES = ("run.json",)
DIRS = ("traces", "stacks", "flight_recorder")
TOP_FILES = WHOLE_FILES + ("supervisor.jsonl",)  # the files copied from a run dir's top
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
        out = [(name, self.run_dir / name) for name in TOP_FILES]
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
            except (OSError, BadInput):  # vanished, unreadable, or no regular file: the
                continue  # next call tries again (a FIFO there is never read)
        return {"rings": rings, "files": files}

    def _ring(self, name: str, path: Path) -> dict[str, Any] | None:
        with os.fdopen(open_regular(path), "rb") as f:
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
        with os.fdopen(open_regular(path), "rb") as f:
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
        data = read_file(path, MAX_FILE_BYTES)
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


def _place(top: CheckedDir, dirs: dict[str, CheckedDir], name: Any) -> tuple[CheckedDir, str]:
    """The mirror directory and file name for a sent ``name`` (``run.json``,
    ``traces/pid-1.ring``); ValueError when the name would leave the mirror."""
    parts = name.split("/") if isinstance(name, str) and len(name) <= 512 else []
    if len(parts) == 2 and parts[0] in dirs:
        folder, base = dirs[parts[0]], parts[1]
    elif len(parts) == 1 and parts[0] in TOP_FILES:
        folder, base = top, parts[0]
    else:
        raise ValueError("bad file name")
    if not base or base.startswith(".") or "\0" in base or len(base) > 255:
        raise ValueError("bad file name")
    return folder, base


def _exists(folder: CheckedDir, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def apply_delta(mirror: Path, delta: Any) -> list[str]:
    """Write a delta into ``mirror`` (created as needed, every file relative to a checked
    directory descriptor: safe_path); returns problems, one line each.  Whatever the delta
    holds, nothing else is raised."""
    if not isinstance(delta, dict):
        return ["mirror: the copy is not a delta"]
    problems: list[str] = []
    try:
        top = CheckedDir(mirror, create=True)
    except OSError as e:
        return [f"mirror {mirror}: {e.strerror or e}"]
    dirs: dict[str, CheckedDir] = {}
    try:
        for d in DIRS:
            dirs[d] = top.subdir(d, create=True)
        for kind, apply in (("rings", _apply_ring), ("files", _apply_file)):
            entries = delta.get(kind)
            for entry in entries if isinstance(entries, list) else []:
                try:
                    if not isinstance(entry, dict):
                        raise ValueError("not an object")
                    apply(top, dirs, entry)
                except (KeyError, TypeError, ValueError, OverflowError, OSError) as e:
                    name = entry.get("name") if isinstance(entry, dict) else None
                    problems.append(f"mirror of {clean(str(name)[:120])!r}: "
                                    f"{type(e).__name__}: {clean(str(e)[:200])}")
    except OSError as e:
        problems.append(f"mirror {mirror}: {e.strerror or e}")
    finally:
        for d in dirs.values():
            d.close()
        top.close()
    return problems


def _apply_ring(top: CheckedDir, dirs: dict[str, CheckedDir], ring: dict[str, Any]) -> None:
    folder, name = _place(top, dirs, ring["name"])
    capacity = ring["capacity"]
    if type(capacity) is not int or not 0 < capacity <= L.DEFAULT_CAPACITY:
        raise ValueError("bad ring name or capacity")  # a real rank's ring at most
    size = L.HEADER_SIZE + capacity * L.RECORD_SIZE
    head = _unb64(ring["header"])
    if head[:8] != L.MAGIC or len(head) > L.HEADER_SIZE:
        raise ValueError("not a trace header")
    records = ring.get("records") or []
    if not isinstance(records, list):
        raise ValueError("records are not a list")
    new = not _exists(folder, name)  # built under a temporary name: no reader sees it
    if new:  # headerless
        _room_for_one_more(folder)
    tmp = f".{name}.tmp"
    fd = folder.open_new(tmp, os.O_RDWR) if new else folder.open_rw(name)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)  # sparse: only written slots take room
        for item in records:
            index, raw = item
            data = _unb64(raw)
            if len(data) == L.RECORD_SIZE and type(index) is int and index >= 0:
                os.pwrite(fd, data, L.HEADER_SIZE + (index % capacity) * L.RECORD_SIZE)
        os.pwrite(fd, head, 0)  # last: the count never runs ahead of the records
    finally:
        os.close(fd)
    if new:
        folder.replace(tmp, name)


def _apply_file(top: CheckedDir, dirs: dict[str, CheckedDir], part: dict[str, Any]) -> None:
    folder, name = _place(top, dirs, part["name"])
    data = _unb64(part["data"])
    offset = part.get("offset", 0)
    if type(offset) is not int or not 0 <= offset <= MAX_MIRROR_FILE_BYTES - len(data):
        raise ValueError(f"the mirror would pass {MAX_MIRROR_FILE_BYTES >> 20} MiB")
    if not _exists(folder, name):
        _room_for_one_more(folder)
    if "offset" in part:
        fd = folder.open_rw(name)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        return
    tmp = f".{name}.tmp"
    with os.fdopen(folder.open_new(tmp), "wb") as f:
        f.write(data)
    folder.replace(tmp, name)


def _room_for_one_more(folder: CheckedDir) -> None:
    """Raise ValueError when a mirror dir already holds MAX_MIRROR_ENTRIES files."""
    count = len(folder.names())
    if count >= MAX_MIRROR_ENTRIES:
        raise ValueError(f"the mirror dir already holds {count} files")
