"""The rank's own control flow: which way each branch and loop of the user's code went
between two collectives, recorded with ``sys.monitoring`` (Python 3.12 and newer).

Only the user's code objects are instrumented (the files ``callsites.is_user_file`` calls the
user's: not site-packages, the standard library, torch or ddpdoctor), one by one with
``set_local_events``: torch's and the frameworks' code runs as it would without ddpdoctor.
The events of the main thread between two of its collectives make a *segment*, written as
PATH records when the next collective begins (``trace/flow.py``); a branch reached ``HOT``
times in one segment is silenced until the segment ends (and at most every
``REENABLE_NS`` after), so a hot inner loop costs 16 events, not thousands.  Each site is
named once in the meta log (``flow_site``), and the first few times each way of it is taken
in the process (``VALUE_CAPTURES``) the values its condition reads are noted
(``flow_values``: a bounded repr of plain values, never a call of the user's code).

On Python 3.10 and 3.11 there is no ``sys.monitoring``: nothing is recorded (a trace
function would slow every Python call of a step), and the analysis falls back on the
source.  A failure here turns the recording off and is noted; the job runs on.
"""

from __future__ import annotations

import dis
import os
import sys
import threading
import time
import types
from typing import Any

from ddpdoctor.runtime import callsites
from ddpdoctor.runtime import flow_values as V
from ddpdoctor.trace import flow as F
from ddpdoctor.trace import layout as L

SUPPORTED = sys.version_info >= (3, 12)
REENABLE_NS = 100_000_000  # a silenced code object is counted again at most this often
VALUE_CAPTURES = 3  # times each way of a site has its values noted, per process
MAX_SITES = 20_000  # sites named per process (then new ones are not counted)
ENV_SWITCH = "DDPDOCTOR_FLOW"  # 0 / off: no control flow recorded (a sub-millisecond step)
ENCODED_KEPT = 64  # segments whose encoded texts are kept (then the cache starts again)
_BRANCHES = {"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE",
             "POP_JUMP_IF_NOT_NONE", "FOR_ITER"}
_TOOL_NAME = "ddpdoctor"
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TEXT_ROOM = L.TEXT_SIZE
_PATH = int(L.RecordKind.PATH)


class _Site:
    """One branch instruction of the user's code, numbered in this process."""

    __slots__ = ("number", "fall", "names")

    def __init__(self, number: int, fall: int, names: tuple[str, ...]):
        self.number = number
        self.fall = fall  # the offset the branch falls through to
        self.names = names  # what its condition reads (locals, globals, self.x)


class FlowRecorder:
    """Records the main thread's path through the user's code (see the module doc)."""

    def __init__(self, rec: Any, tool: int):
        self.rec = rec
        self.tool = tool
        self.events = sys.monitoring.events.BRANCH
        self.main = threading.main_thread().ident
        self.pid = os.getpid()
        self.seg: dict[tuple[int, int, int], int] = {}
        self.keys: dict[tuple[int, int, int], tuple[_Site, int]] = {}
        self.sites: dict[tuple[int, int], _Site] = {}
        self.captured: dict[tuple[int, int], int] = {}
        self.codes: dict[int, types.CodeType] = {}  # every code object instrumented
        self.silenced: dict[int, tuple[types.CodeType, set[int]]] = {}
        self.reenabled: dict[int, int] = {}
        self.instructions: dict[int, dict[int, dis.Instruction]] = {}
        self.modules_seen = 0
        self.scanned: set[str] = set()
        self.user_files: dict[str, bool] = {}
        # the texts of the segments seen lately, by their (key, count) items: a training
        # loop's steps go a few ways over and over (a step that logs, one that steps the
        # optimizer), and encoding a segment anew costs tens of microseconds after a step
        self.encoded: dict[tuple[Any, ...], tuple[list[bytes], int]] = {}
        self.opening = (-1, -1)  # the (group, seq) of the collective that began the segment
        self.number = 0
        self.flushed = -1  # the segment whose open part was written when a loop got hot
        self.started = time.time_ns()
        self.on = True

    # -- instrumenting the user's code ---------------------------------------------------
    def users(self, filename: str) -> bool:
        """Is ``filename`` the user's code (never ddpdoctor's own, whatever path reached
        it: ``bench/../ddpdoctor/...`` is ddpdoctor too)?"""
        known = self.user_files.get(filename)
        if known is None:
            real = os.path.normpath(filename) if not filename.startswith("<") else filename
            known = self.user_files[filename] = callsites.is_user_file(real) and \
                not real.startswith(_OWN_DIR)
        return known

    def instrument(self, code: types.CodeType) -> None:
        """Count the branches of ``code`` and of every code object nested in it."""
        stack = [code]
        while stack:
            c = stack.pop()
            if id(c) in self.codes or not self.users(c.co_filename):
                continue
            self.codes[id(c)] = c
            sys.monitoring.set_local_events(self.tool, c, self.events)
            stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]

    def instrument_stack(self, frame: types.FrameType | None) -> None:
        """The user's code objects running on this thread now (a script's module code)."""
        while frame is not None:
            self.instrument(frame.f_code)
            frame = frame.f_back

    def scan_modules(self) -> None:
        """The user's modules imported since the last scan: their functions and methods."""
        if len(sys.modules) == self.modules_seen:
            return
        self.modules_seen = len(sys.modules)
        for name, module in list(sys.modules.items()):
            if name in self.scanned:
                continue
            self.scanned.add(name)
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and not name.startswith("ddpdoctor") and self.users(path):
                for code in V.codes_in(vars(module), path):
                    self.instrument(code)

    # -- the events ------------------------------------------------------------------------
    def _first(self, code: types.CodeType, off: int, dest: int,
               key: tuple[int, int, int]) -> None:
        """The first event of ``key`` in this segment: its site named, its values noted."""
        if len(self.seg) == 1:
            self.started = time.time_ns()  # the segment's first event
        known = self.keys.get(key)
        if known is None:
            site = self._site(code, off)
            if site is None:
                self.seg.pop(key, None)
                return
            known = self.keys[key] = (site, 0 if dest == site.fall else 1)
        site, way = known
        done = self.captured.get((site.number, way), 0)
        if done < VALUE_CAPTURES and site.names:
            self.captured[(site.number, way)] = done + 1
            self._capture(site, way, sys._getframe(2))

    def _site(self, code: types.CodeType, off: int) -> _Site | None:
        found = self.sites.get((id(code), off))
        if found is not None or len(self.sites) >= MAX_SITES:
            return found
        table = self.instructions.get(id(code))
        if table is None:
            table = self.instructions[id(code)] = {i.offset: i for i in dis.get_instructions(code)}
        ins = table.get(off)
        if ins is None:
            return None
        offsets = sorted(table)
        nxt = offsets[offsets.index(off) + 1] if offsets.index(off) + 1 < len(offsets) else -1
        line = ins.positions.lineno if ins.positions else None
        names = V.names_before(table, offsets, off, line)
        site = self.sites[(id(code), off)] = _Site(len(self.sites), nxt, names)
        fall = table.get(nxt)
        target = table.get(ins.argval) if isinstance(ins.argval, int) else None
        self.rec.meta("flow_site", site=site.number, file=code.co_filename, line=line,
                      col=ins.positions.col_offset if ins.positions else None,
                      func=code.co_qualname, op=ins.opname, names=list(names),
                      fall=V.line_of(fall), jump=V.line_of(target))
        return site

    def _capture(self, site: _Site, way: int, frame: types.FrameType | None) -> None:
        if frame is None:
            return
        values = {}
        for name in site.names:
            found, value = V.lookup(frame, name)
            if found and not isinstance(value, (types.ModuleType, types.FunctionType,
                                                type, types.BuiltinFunctionType)):
                values[name] = V.short_value(value)
        self.rec.meta("flow_values", site=site.number, way=way, after=list(self.opening),
                      segment=self.number, values=values)

    def _silence(self, code: types.CodeType, off: int) -> Any:
        """A branch went ``HOT`` times this segment: silence it, and write the segment so
        far once (a rank that loops with no collective shows its loop)."""
        entry = self.silenced.get(id(code))
        if entry is None:
            entry = self.silenced[id(code)] = (code, set())
        entry[1].add(off)
        if self.flushed != self.number:
            self.flushed = self.number
            self._write(-1, -1)
        return sys.monitoring.DISABLE

    # -- segments ---------------------------------------------------------------------------
    def close(self, group: int, seq: int) -> None:
        """A collective of ``group`` at ``seq`` begins on this thread: the segment ends."""
        if not self.on or threading.get_ident() != self.main:
            return
        if self.seg or self.silenced:  # (between a DDP's buckets nothing of the user's ran)
            self._write(group, seq)
        self.opening = (group, seq)
        self.number += 1
        if len(sys.modules) != self.modules_seen:
            self.scan_modules()
        if self.silenced:
            self._reenable()

    def flush_open(self) -> None:
        """Write the segment so far (the process ends, or its rank waits on no call)."""
        if self.on and threading.get_ident() == self.main:
            self._write(-1, -1)

    def _encode(self) -> tuple[list[bytes], int]:
        """The segment's PATH record texts (trace/flow.py), one entry per way of a site in
        the order the rank first took it, and its count of events."""
        by_way: dict[tuple[int, int], list[int]] = {}
        total = 0
        for key, n in self.seg.items():
            known = self.keys.get(key)
            if known is None:
                continue
            site, way = known
            counts = by_way.get((site.number, way))
            if counts is None:
                counts = by_way[(site.number, way)] = [0, 0]
            counts[0] += n
            if n >= F.HOT:
                counts[1] = 1
            total += n
        silent: set[int] = set()
        if self.silenced:
            silent = {self.sites[(cid, off)].number for cid, (_, offs)
                      in list(self.silenced.items()) for off in offs
                      if (cid, off) in self.sites}
        entries = [F.FlowEntry(s, 0 if w else n, n if w else 0, bool(sat) or s in silent)
                   for (s, w), (n, sat) in by_way.items()]
        seen = {s for s, _ in by_way}
        entries += [F.FlowEntry(s, 0, 0, dark=True) for s in sorted(silent - seen)]
        return [t.encode() for t in F.encode_entries(entries, _TEXT_ROOM)], total

    def _write(self, group: int, seq: int) -> None:
        """Write the segment (the texts kept from a segment that went the very same ways:
        a training loop's steps mostly do) and, at a collective, start the next."""
        seg = self.seg
        now = time.time_ns()
        if seg or self.silenced:
            items: tuple[Any, ...] = tuple(seg.items())
            if self.silenced:  # the silenced branches are part of what is written
                items += tuple((cid, frozenset(offs)) for cid, (_, offs)
                               in self.silenced.items())
            found = self.encoded.get(items)
            if found is None:
                if len(self.encoded) >= ENCODED_KEPT:
                    self.encoded.clear()
                found = self.encoded[items] = self._encode()
            texts, total = found
            g, s = self.opening
            append = self.rec.writer.append
            for part, text in enumerate(texts):
                append(_PATH, 0, 0, 0, g, s, self.started, now, total, group, part,
                       self.number, seq, text)
        if group >= 0:
            seg.clear()

    def _reenable(self) -> None:
        now = time.monotonic_ns()
        for cid, (code, _) in list(self.silenced.items()):
            if now - self.reenabled.get(cid, 0) >= REENABLE_NS:
                sys.monitoring.set_local_events(self.tool, code, 0)
                sys.monitoring.set_local_events(self.tool, code, self.events)
                self.reenabled[cid] = now
                del self.silenced[cid]

    def stop(self) -> None:
        """Turn the recording off (an error, or a forked child that is not this rank)."""
        self.on = False
        try:
            sys.monitoring.set_events(self.tool, 0)
            for code in self.codes.values():
                sys.monitoring.set_local_events(self.tool, code, 0)
            sys.monitoring.register_callback(self.tool, self.events, None)
            sys.monitoring.free_tool_id(self.tool)
        except (ValueError, RuntimeError):
            pass  # already freed


_flow: FlowRecorder | None = None
_said: list[bool] = []  # the notice of an older Python, once a process


def start(rec: Any, frame: types.FrameType | None = None) -> FlowRecorder | None:
    """Begin recording this process's control flow (once; from the main thread, as the
    user's code imports torch): the user's code on this thread's stack and in its modules.
    Python < 3.12, DDPDOCTOR_FLOW=0, or no free monitoring tool: nothing, said once in the
    meta log."""
    global _flow
    if _flow is not None or threading.get_ident() != threading.main_thread().ident:
        return _flow
    if os.environ.get(ENV_SWITCH, "").strip().lower() in ("0", "off", "false", "no"):
        if not _said:
            _said.append(True)
            rec.meta("flow_off", why=f"{ENV_SWITCH}=0 turned it off: decisions are read "
                     "from the source instead")
        return None
    if not SUPPORTED:
        if not _said:
            _said.append(True)
            rec.meta("flow_off", why="Python 3.12 or newer is needed (sys.monitoring): "
                     "decisions are read from the source instead")
        return None
    tool = next((t for t in (4, 3, 2) if sys.monitoring.get_tool(t) is None), None)
    if tool is None:
        rec.meta("flow_off", why="every sys.monitoring tool id is taken (a debugger, a "
                 "profiler, a coverage tool)")
        return None
    try:
        sys.monitoring.use_tool_id(tool, _TOOL_NAME)
        flow = FlowRecorder(rec, tool)
        sys.monitoring.register_callback(tool, flow.events, _callback(flow))
        flow.instrument_stack(frame or sys._getframe(1))
        flow.scan_modules()
    except Exception as e:  # noqa: BLE001 - no diagnosis, never a broken job
        rec.note_error("control flow", e)
        return None
    _flow = flow
    os.register_at_fork(after_in_child=_forked)
    return flow


def _callback(flow: FlowRecorder) -> Any:
    """The BRANCH callback (the hot path: a thread check and two dict operations, with
    everything it needs bound locally); off for good at its first error."""
    seg, get, first, silence = flow.seg, flow.seg.get, flow._first, flow._silence
    main, ident, hot, disable = flow.main, threading.get_ident, F.HOT, sys.monitoring.DISABLE

    def on_branch(code: types.CodeType, off: int, dest: int, _id: Any = id) -> Any:
        if ident() != main:
            return None  # another thread's decisions are not the rank's path
        try:
            key = (_id(code), off, dest)
            n = get(key)
            if n is None:
                seg[key] = 1
                first(code, off, dest, key)
            elif n < hot:
                seg[key] = n + 1
            else:
                return silence(code, off)
        except Exception as e:  # noqa: BLE001 - see start
            flow.rec.note_error("control flow", e)
            flow.stop()
            return disable
        return None

    return on_branch


def _forked() -> None:
    """A forked child (a DataLoader worker) records no path of its own."""
    global _flow
    if _flow is not None:
        _flow.stop()
        _flow = None


def active() -> FlowRecorder | None:
    """The recording of this process, if any."""
    return _flow
