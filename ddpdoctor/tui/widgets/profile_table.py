"""ProfileTable: how each rank spent its time, computing vs waiting in collectives."""

from __future__ import annotations

from rich.text import Text

from ddpdoctor.tui.model import ProfileView, RankView, ReportView
from ddpdoctor.tui.rank_filter import matches_filter
from ddpdoctor.tui.widgets.synced_table import Cell, SyncedTable

BAR_WIDTH = 40


class ProfileTable(SyncedTable):
    """One row a rank: compute and wait seconds and a bar of the two."""

    COLUMNS = (
        ("rank", "rank", 6),
        ("compute", "compute", 9),
        ("wait", "waiting", 9),
        ("share", "wait %", 7),
        ("collectives", "collectives", 11),
        ("bar", "computing ■ / waiting ■", BAR_WIDTH),
    )

    def show(self, view: ReportView, query: str) -> None:
        rows = []
        for rank, profile in sorted(view.profile.items()):
            rank_view = view.rank(rank) or RankView(rank=rank)
            if matches_filter(rank_view, query):
                rows.append((str(rank), profile_cells(rank, profile)))
        self.sync(rows)


def profile_cells(rank: int, profile: ProfileView) -> tuple[Cell, ...]:
    share = profile.wait_fraction
    waiting = round(share * BAR_WIDTH) if profile.compute_s + profile.wait_s > 0 else 0
    bar = Text()
    bar.append("█" * (BAR_WIDTH - waiting), style="green")
    bar.append("█" * waiting, style="yellow")
    return (
        str(rank),
        Text(f"{profile.compute_s:.1f}s", justify="right"),
        Text(f"{profile.wait_s:.1f}s", justify="right"),
        Text(f"{share:.0%}", justify="right", style="bold yellow" if share > 0.5 else ""),
        Text("" if profile.collectives is None else str(profile.collectives), justify="right"),
        bar,
    )
