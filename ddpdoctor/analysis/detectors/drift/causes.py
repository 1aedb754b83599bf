"""Why replicas drifted apart: the causes the checks saw at the first divergent step, most
likely first (a write outside the optimizer, requires_grad changed, a gradient accumulated
after DDP averaged it, no gradient on some ranks, optimizer settings or LR scheduler steps
that differ, a gradient changed between backward and the step)."""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.model import ranks_text
from ddpdoctor.analysis.detectors.drift.compare import Divergence, deviants_of
from ddpdoctor.analysis.detectors.drift.facts import Check, HyperRow, ReplicaFacts
from ddpdoctor.analysis.detectors.drift.cause_kinds import Cause, CauseKind, listed, short_site


def _names(div: Divergence, indices: list[int] | tuple[int, ...]) -> tuple[str, ...]:
    names = div.replicas.names
    return tuple(names[i] for i in indices if i < len(names))


def _wrote_apart(per: dict[int, Any]) -> list[str]:
    """The parameters that a write every rank made left with different values."""
    apart = []
    for name in next(iter(per.values()))[1]:
        bits = set()
        for w, _ in per.values():
            k = w.params.index(name) if name in w.params else len(w.prints)
            if k < len(w.prints) and w.prints[k] is not None:
                bits.add(w.prints[k][0])
        if len(bits) > 1:
            apart.append(name)
    return apart


def _writes(div: Divergence, facts: ReplicaFacts) -> list[Cause]:
    """load_state_dict / init calls on differing parameters, before the step, that not
    every rank made, or that every rank made with different values."""
    differing = set(_names(div, div.params))
    ranks = set(div.replicas.ranks)
    seen: dict[tuple[str, str], dict[int, Any]] = {}
    for w in facts.writes:
        if w.ddp == div.replicas.ddp and w.rank in ranks and w.step < div.step:
            hit = [p for p in w.params if p in differing]
            if hit:
                seen.setdefault((w.what, hit[0]), {}).setdefault(w.rank, (w, hit))
    out = []
    for (what, _), per in seen.items():
        w, hit = next(iter(per.values()))
        at = short_site(w.site)
        if set(per) == ranks:  # every rank did it: a cause only where the values differ
            apart = _wrote_apart(per)
            if apart:
                out.append(Cause(CauseKind.WRITE, tuple(sorted(per)), tuple(apart),
                                 f"every rank called {what} on {listed(apart)} "
                                 + (f"after step {w.step}" if w.step else
                                    "before the first step")
                                 + (f" at {at}" if at else "") + ", after DDP was built, "
                                 "and wrote different values on each (each rank's own "
                                 "random numbers or files)", w.site))
            continue
        out.append(Cause(CauseKind.WRITE, tuple(sorted(per)), tuple(hit),
                         f"{ranks_text(sorted(per))} called {what} on {listed(hit)} "
                         + (f"after step {w.step}" if w.step else "before the first step")
                         + (f" at {at}" if at else "") + ", after DDP was "
                         "built; the other ranks did not", w.site))
    return out


def _by_rank(at: dict[int, Check], div: Divergence, attr: str) -> list[Cause]:
    """Parameters listed in a check's ``attr`` (flipped, twice) on some ranks."""
    hits: dict[int, list[int]] = {}
    for rank, c in at.items():
        for i in getattr(c, attr):
            if i in div.params:
                hits.setdefault(i, []).append(rank)
    if not hits:
        return []
    ranks = tuple(sorted({r for rs in hits.values() for r in rs}))
    names = _names(div, sorted(hits))
    if attr == "flipped":
        return [Cause(CauseKind.REQUIRES_GRAD, ranks, names,
                      f"requires_grad of {listed(names)} changed on {ranks_text(ranks)} "
                      "after DDP was built (DDP's reducer keeps the parameters it was built "
                      "with)")]
    return [Cause(CauseKind.ACCUMULATED_TWICE, ranks, names,
                  f"the gradient of {listed(names)} was accumulated twice in one backward on "
                  f"{ranks_text(ranks)}: DDP averaged the first part, the part added after its "
                  "bucket was reduced stayed each rank's own (a reentrant activation checkpoint "
                  "re-runs its block in a nested backward)")]


def _no_gradient(at: dict[int, Check], div: Divergence) -> list[Cause]:
    missing: dict[int, list[int]] = {}
    for i in div.params:
        have = {r: c.grads[i] if c.grads is not None and i < len(c.grads) else ()
                for r, c in at.items()}
        none = [r for r, g in have.items() if g is None]
        if none and len(none) < len(have):
            missing[i] = none
    if not missing:
        return []
    ranks = tuple(sorted({r for rs in missing.values() for r in rs}))
    names = _names(div, sorted(missing))
    return [Cause(CauseKind.NO_GRADIENT, ranks, names,
                  f"{listed(names)} had no gradient on {ranks_text(ranks)} at step "
                  f"{div.step} (in no DDP bucket there) while the other ranks stepped with one")]


def _scheduler(at: dict[int, Check]) -> list[Cause]:
    counts: dict[str, dict[int, tuple[int, str]]] = {}
    for rank, c in at.items():
        for s in c.schedulers:
            counts.setdefault(s.name, {})[rank] = (s.steps, s.site)
    out = []
    for name, per in counts.items():
        full = {r: per.get(r, (0, "")) for r in at}
        if len({n for n, _ in full.values()}) < 2:
            continue
        most = max(n for n, _ in full.values())
        stepped = sorted(r for r, (n, _) in full.items() if n == most)
        site = next((s for r, (n, s) in sorted(full.items()) if n == most and s), "")
        at_site = short_site(site)
        told = ", ".join(f"{n} on rank {r}" for r, (n, _) in sorted(full.items()))
        out.append(Cause(CauseKind.SCHEDULER, tuple(stepped), (),
                         f"the LR scheduler {name} was stepped a different number of times "
                         f"on each rank ({told})" + (f"; it steps at {at_site}" if at_site
                                                      else ""), site))
    return out


def _hyper(at: dict[int, Check], div: Divergence) -> list[Cause]:
    """Param group settings that differ between ranks, each with the user's line that last
    changed it where a rank recorded one."""
    out = []
    shown: set[tuple[int, str]] = set()
    for i in div.params:
        rows = {}
        for rank, c in at.items():
            g = c.group_of[i] if i < len(c.group_of) else -1
            if 0 <= g < len(c.hyper):
                rows[rank] = c.hyper[g]
        if len(rows) < 2:
            continue
        settings = {r: dict(row.settings) for r, row in rows.items()}
        keys = sorted({k for s in settings.values() for k in s})
        for k in keys:
            values = {r: s.get(k) for r, s in settings.items()}
            if len({repr(v) for v in values.values()}) < 2 or (i, k) in shown:
                continue
            shown.add((i, k))
            row = next(iter(rows.values()))
            told = ", ".join(f"{v} on rank {r}" for r, v in sorted(values.items()))
            site, where = _changed_at(rows, k)
            out.append(Cause(CauseKind.HYPERPARAMETERS, tuple(sorted(values)),
                             _names(div, [i]),
                             f"{row.optimizer} param group {row.group} (holding "
                             f"{div.replicas.names[i]}) has {k} {told}{where}", site))
    merged: dict[str, Cause] = {}
    for c in out:  # one cause a setting, naming every parameter it holds
        key = c.text.split(" has ", 1)[1]
        if key in merged:
            m = merged[key]
            merged[key] = Cause(m.kind, m.ranks, m.params + c.params, m.text, m.site)
        else:
            merged[key] = c
    return list(merged.values())


def _changed_at(rows: dict[int, HyperRow], setting: str) -> tuple[str, str]:
    """The user's line that set ``setting`` apart, and the words that say so: a line that
    changed it on some ranks only, else the line that changed it last."""
    sites = {r: row.sites_of(setting) for r, row in sorted(rows.items())}
    ranks_at: dict[str, list[int]] = {}
    for r, seen in sites.items():
        for site in seen:
            ranks_at.setdefault(site, []).append(r)
    apart = [(site, ranks) for site, ranks in ranks_at.items() if len(ranks) < len(sites)]
    if apart:
        parts = [f"{short_site(site)} on {ranks_text(ranks)} only" for site, ranks in apart]
        return apart[0][0], f" (changed at {'; '.join(parts)})"
    last = next((seen[-1] for seen in sites.values() if seen), "")
    return (last, f" (last changed at {short_site(last)})") if last else ("", "")


def _gradients_changed(at: dict[int, Check], div: Divergence) -> list[Cause]:
    grads = {r: c.grads for r, c in at.items() if c.grads is not None}
    if len(grads) < 2:
        return []
    reduced = div.replicas.sets[min(div.replicas.sets)].requires_grad
    differ = [i for i in div.params if (i >= len(reduced) or reduced[i]) and
              len({g[i][0] for g in grads.values() if i < len(g) and g[i] is not None}) > 1]
    if not differ:
        return []
    ranks, _ = deviants_of(grads, differ)  # type: ignore[arg-type]
    names = _names(div, differ)
    text = (f"the gradient of {listed(names)} differed between ranks when the optimizer "
            f"stepped at step {div.step}, although DDP averages it in backward: it was changed "
            "between backward and the step on some ranks")
    site, clipped = _clip_differs(at)
    if site:
        return [Cause(CauseKind.GRADIENT_CHANGED, ranks, names,
                      f"{text}: clip_grad_norm_ at {short_site(site)} clipped with max_norm "
                      f"{clipped}", site)]
    return [Cause(CauseKind.GRADIENT_CHANGED, ranks, names,
                  f"{text} (clipping by a norm each rank computes itself, scaling or editing it "
                  "by hand)")]


def _clip_differs(at: dict[int, Check]) -> tuple[str, str]:
    """A clip_grad_norm_ call site whose last max_norm differed between ranks, and the
    values by rank."""
    by_site: dict[str, dict[int, float | None]] = {}
    for rank, c in at.items():
        for site, v in c.clips:
            by_site.setdefault(site, {})[rank] = v
    for site, values in by_site.items():
        if len(set(values.values())) > 1:
            return site, ", ".join(f"{v:.4g} on rank {r}" if v is not None else f"? on rank {r}"
                                   for r, v in sorted(values.items()))
    return "", ""


def _versions(at: dict[int, Check], div: Divergence) -> list[Cause]:
    differ = []
    for i in div.params:
        vs = {c.versions[i] for c in at.values() if i < len(c.versions)}
        if len(vs) > 1:
            differ.append(i)
    if not differ:
        return []
    prints = {r: tuple((c.versions[i], None) if i < len(c.versions) else None
                       for i in range(len(div.replicas.names))) for r, c in at.items()}
    ranks, _ = deviants_of(prints, differ)  # type: ignore[arg-type]
    names = _names(div, differ)
    told = ", ".join(f"{c.versions[differ[0]]} on rank {r}" for r, c in sorted(at.items())
                     if differ[0] < len(c.versions))
    return [Cause(CauseKind.WRITTEN_IN_PLACE, ranks, names,
                  f"{listed(names)} was written in place outside the optimizer on some ranks "
                  f"(in-place writes to {names[0]} since DDP was built: {told})")]


def _unsynced(at: dict[int, Check], div: Divergence, facts: ReplicaFacts) -> list[Cause]:
    """Ranks whose synced backward passes by the divergent check do not match their updates
    as the others' do: a rank with a pass more than the majority for the same updates
    skipped an optimizer step after a synced backward; otherwise DDP paired all-reduces of
    different steps (a synced backward skipped or added on some ranks)."""
    counts = {r: sum(1 for t in facts.passes.get(r, ()) if t <= c.t_ns)
              for r, c in at.items() if c.t_ns}
    if len(counts) < 2 or len(set(counts.values())) < 2:
        return []
    values = list(counts.values())
    usual = max(set(values), key=values.count)
    odd = tuple(sorted(r for r, n in counts.items() if n != usual))
    told = ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))
    names = _names(div, div.params)
    if values.count(usual) * 2 > len(values):
        if all(counts[r] > usual for r in odd):
            return [Cause(CauseKind.SKIPPED_STEP, odd, names,
                          f"{ranks_text(odd)} ran more synced backward passes than the other "
                          f"ranks for the same {div.step} updates ({told}): "
                          f"{'it' if len(odd) == 1 else 'they'} skipped an optimizer step "
                          "after a synced backward (the gradient was averaged on every rank, "
                          f"and {ranks_text(odd)} did not apply it)")]
        ranks = odd
    else:
        ranks = tuple(sorted(counts))
    return [Cause(CauseKind.UNSYNCED, ranks, names,
                  f"the ranks had run different numbers of synced backward passes by step "
                  f"{div.step} ({told}): a backward skipped or added on some ranks makes DDP "
                  "average one step's gradients with another's (or an optimizer step skipped "
                  "on some ranks), and each rank steps on its own")]


def _grad_scale(at: dict[int, Check]) -> list[Cause]:
    """A GradScaler whose scale differs between ranks: each rank unscales the averaged
    gradient by its own factor."""
    out = []
    n = min(len(c.scalers) for c in at.values())
    for i in range(n):
        scales = {r: c.scalers[i][1] for r, c in sorted(at.items())}
        if len(set(scales.values())) < 2:
            continue
        name, _, site = next(iter(at.values())).scalers[i]
        told = ", ".join(f"{v:g} on rank {r}" for r, v in scales.items())
        values = list(scales.values())
        usual = max(set(values), key=values.count)
        odd = tuple(r for r, v in scales.items() if v != usual) \
            if values.count(usual) * 2 > len(values) else tuple(scales)
        at_site = short_site(site)
        out.append(Cause(CauseKind.GRAD_SCALE, odd, (),
                         f"the {name}'s scale is {told}" + (f" (updated at {at_site})"
                                                            if at_site else "")
                         + ": each rank unscales the averaged gradient by its own scale "
                         "(a scaler state that differs after an uneven epoch or a skip on "
                         "some ranks)", site))
    return out


def likely_causes(div: Divergence, facts: ReplicaFacts) -> list[Cause]:
    """Every cause seen at the divergent step, the likely one first."""
    at = div.replicas.checks[div.step]
    found = (_writes(div, facts) + _by_rank(at, div, "flipped") + _by_rank(at, div, "twice")
             + _unsynced(at, div, facts) + _no_gradient(at, div) + _scheduler(at) + _hyper(at, div)
             + _grad_scale(at)
             + _gradients_changed(at, div) + _versions(at, div))
    order = list(CauseKind)
    found.sort(key=lambda c: order.index(c.kind))
    if not found:
        prev = f"step {div.previous}" if div.previous is not None else "DDP's construction"
        found.append(Cause(CauseKind.UNKNOWN, div.deviants, _names(div, div.params),
                           f"nothing ddpdoctor watches differed: the change came between "
                           f"{prev} and step {div.step} (a write through .data, or a "
                           "per-rank computation in the optimizer)"))
    return found
