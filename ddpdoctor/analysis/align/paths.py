"""Where the ranks' paths through the user's code parted: their recorded segments aligned by
the collective that opened them, and the first branch, in time, they went different ways at.

A site is the same on every rank by its file's name, line, column and bytecode (the numbers
each rank gave it differ).  Segments align by the (group, seq) of the collective that
opened them; the segment that matters is the newest one every rank has: after it their
collectives differ (one waits in a call, one left, one computes).  Inside it, the first
site (in the order the ranks first reached their sites) where the ranks that reached it
went different ways is where they parted; a site counted only up to its limit (a hot loop)
or silenced says nothing."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.analysis.load.flow import FlowSite, RankFlow, Segment
from ddpdoctor.analysis.model import JobView
from ddpdoctor.trace.flow import FlowEntry

SiteKey = tuple[str, int, int, str]


@dataclass(frozen=True)
class Way:
    """Which way one rank went at a site in one segment."""

    rank: int
    site: FlowSite
    entry: FlowEntry  # both ways' counts (a site's entries merged)
    segment: Segment
    positions: tuple[int, int]  # when the rank first went each way (its entry's place)

    @property
    def counts(self) -> tuple[int, int]:
        return (self.entry.fell, self.entry.jumped)

    @property
    def position(self) -> int:
        return min(self.positions)


@dataclass(frozen=True)
class Parting:
    """The first site at which the ranks went different ways: each rank's way there, and
    the ranks that did not reach it in that segment (``unreached``)."""

    key: SiteKey
    opening: tuple[str, int]
    ways: dict[int, Way]
    unreached: tuple[int, ...]

    @property
    def site(self) -> FlowSite:
        return next(iter(self.ways.values())).site


def flows_of(job: JobView, ranks: list[int] | tuple[int, ...]) -> dict[int, RankFlow]:
    """The recorded flows of ``ranks`` (those that recorded one)."""
    out = {}
    for r in ranks:
        run = job.ranks.get(r)
        if run is not None and run.flow is not None and run.flow.segments:
            out[r] = run.flow
    return out


def _by_opening(flow: RankFlow) -> dict[tuple[str, int], Segment]:
    """The rank's segments by the call that opened them (a later one of the same opening,
    a re-created group's, wins)."""
    return {s.opening: s for s in flow.segments}


def common_openings(flows: dict[int, RankFlow]) -> list[tuple[str, int]]:
    """The openings of the segments every rank has, newest first."""
    openings = [_by_opening(f) for f in flows.values()]
    if not openings:
        return []
    common = set(openings[0]).intersection(*openings[1:])
    first = next(iter(flows.values()))
    order = {s.opening: s.number for s in first.segments}
    return sorted(common, key=lambda k: -order.get(k, -1))


def last_common_opening(flows: dict[int, RankFlow]) -> tuple[str, int] | None:
    """The opening of the newest segment every rank has."""
    found = common_openings(flows)
    return found[0] if found else None


NEVER = 1 << 30  # the place of a way not taken


def ways_in(flow: RankFlow, rank: int, segment: Segment) -> dict[SiteKey, Way]:
    """Each site the rank reached in ``segment``, keyed across ranks (its entries, one a
    way, merged; each way's place kept)."""
    out: dict[SiteKey, Way] = {}
    for i, e in enumerate(segment.entries):
        site = flow.sites.get(e.site)
        if site is None:
            continue
        w = out.get(site.key)
        mine = (i if e.fell or e.dark else NEVER, i if e.jumped or e.dark else NEVER)
        if w is None:
            out[site.key] = Way(rank, site, e, segment, mine)
            continue
        merged = FlowEntry(e.site, w.entry.fell + e.fell, w.entry.jumped + e.jumped,
                           w.entry.saturated or e.saturated, w.entry.dark and e.dark)
        out[site.key] = Way(rank, site, merged, segment,
                            (min(w.positions[0], mine[0]), min(w.positions[1], mine[1])))
    return out


def _when(here: list[Way]) -> int:
    """When the ranks' ways at a site first differed: the earliest place, on any rank, of a
    way whose count differs between them."""
    differ = [i for i in (0, 1) if len({w.counts[i] for w in here}) > 1]
    return min((w.positions[i] for w in here for i in differ if w.positions[i] < NEVER),
               default=min(w.position for w in here))


def _known(w: Way) -> bool:
    return not (w.entry.saturated or w.entry.dark)


def _standing(flow: RankFlow, w: Way) -> bool:
    """Did the rank go this way here in its earlier segments too (a standing difference: a
    rank-0-only log line every step), rather than newly?"""
    before = earlier_ways(flow, w.rank, w.site.key, w.segment.number)
    had = {i for e in before for i, n in enumerate(e.counts) if n}
    return bool(before) and {i for i, n in enumerate(w.counts) if n} <= had


def differences(ways: dict[int, dict[SiteKey, Way]],
                flows: dict[int, RankFlow] | None = None) -> list[tuple[SiteKey, bool]]:
    """The sites where the ranks went different ways, first first: (the key, whether every
    rank reached it).  Sites every rank reached and took differently come first, those where
    some rank went a way new to it before standing differences (each rank its usual way,
    e.g. a branch on the rank every step); a site only some reached (they went on, the
    others stayed or turned earlier) after them."""
    keys: dict[SiteKey, int] = {}
    for per_rank in ways.values():
        for key, w in per_rank.items():
            keys[key] = min(keys.get(key, w.position), w.position)
    new, standing, some = [], [], []
    for key, position in keys.items():
        here = [per_rank[key] for per_rank in ways.values() if key in per_rank]
        if not all(_known(w) for w in here):
            continue
        if len(here) == len(ways):
            if len({w.counts for w in here}) > 1:
                usual = flows is not None and all(_standing(flows[w.rank], w) for w in here)
                (standing if usual else new).append((_when(here), key))
        else:
            some.append((position, key))
    return [(key, every) for found, every in ((new, True), (standing, True), (some, False))
            for _, key in sorted(found)]


def first_difference(ways: dict[int, dict[SiteKey, Way]],
                     flows: dict[int, RankFlow] | None = None
                     ) -> tuple[SiteKey, bool] | None:
    """The first of ``differences``, or None."""
    found = differences(ways, flows)
    return found[0] if found else None


LOOK_BACK = 4  # common segments searched, newest first, for where the paths parted


def partings(job: JobView, ranks: list[int] | tuple[int, ...],
             opening: tuple[str, int] | None = None) -> list[Parting]:
    """Every site where the paths of ``ranks`` parted, first first, in their newest common
    segment where they parted at all (else one of the few before it: a rank that failed a
    step after its own turn), or in the segment ``opening`` began; empty when fewer than
    two ranks recorded their flow, or they went the same ways."""
    flows = flows_of(job, ranks)
    if len(flows) < 2:
        return []
    for at in [opening] if opening is not None else common_openings(flows)[:LOOK_BACK]:
        ways = {}
        for r, flow in flows.items():
            segment = _by_opening(flow).get(at)
            if segment is None:
                return []
            ways[r] = ways_in(flow, r, segment)
        found = differences(ways, flows)
        if found:
            return [Parting(key, at, {r: w[key] for r, w in ways.items() if key in w},
                            tuple(sorted(r for r, w in ways.items() if key not in w)))
                    for key, _ in found]
    return []


LOOK_FAR = 64  # older common segments searched for the turn behind a loop's end


def earlier_turns(job: JobView, ranks: list[int] | tuple[int, ...]) -> list[Parting]:
    """Where the ranks took new, different ways at a branch that is not a loop's own test,
    in their older common segments, newest first: the turn (a `continue` on a NaN loss, a
    skipped step) behind a loop that ended at different counts."""
    flows = flows_of(job, ranks)
    if len(flows) < 2:
        return []
    out = []
    for at in common_openings(flows)[1:LOOK_FAR]:
        ways = {r: ways_in(f, r, _by_opening(f)[at]) for r, f in flows.items()}
        keys = {k for w in ways.values() for k in w}
        found = []
        for key in keys:
            here = [w[key] for w in ways.values() if key in w]
            if len(here) < len(ways) or here[0].site.loop or not all(_known(w) for w in here) \
                    or len({w.counts for w in here}) < 2 or \
                    all(_standing(flows[w.rank], w) for w in here):
                continue
            found.append((_when(here), Parting(key, at, {w.rank: w for w in here}, ())))
        out += [p for _, p in sorted(found, key=lambda wp: wp[0])]
    return out


def parting(job: JobView, ranks: list[int] | tuple[int, ...],
            opening: tuple[str, int] | None = None) -> Parting | None:
    """Where the paths of ``ranks`` first parted (see ``partings``), or None."""
    found = partings(job, ranks, opening)
    return found[0] if found else None


def earlier_ways(flow: RankFlow, rank: int, key: SiteKey,
                 before: int | None = None) -> list[Way]:
    """Every way the rank went at site ``key`` in its recorded segments (before segment
    number ``before``, if given), oldest first."""
    out = []
    for segment in flow.segments:
        if before is not None and segment.number >= before:
            break
        w = ways_in(flow, rank, segment).get(key)
        if w is not None:
            out.append(w)
    return out
