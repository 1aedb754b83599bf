"""SyncedTable: a DataTable that updates changed cells in place instead of rebuilding."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, ColumnKey, RowKey

Cell = str | Text


class SyncedTable(DataTable[Cell]):
    """A DataTable whose rows are set as a whole with `sync`; only changed cells are touched.

    Rows keep the order they are given; when rows come or go in a way that breaks
    that order the table is rebuilt (rare: a filter change, a new rank).
    """

    BINDINGS = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    COLUMNS: Sequence[tuple[str, str, int | None]] = ()
    """(key, label, width) of each column; width None sizes to content."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("cursor_type", "row")
        kwargs.setdefault("zebra_stripes", True)
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._rendered: dict[str, tuple[Cell, ...]] = {}
        self._order: list[str] = []
        self.cell_updates = 0
        self.rebuilds = 0

    def on_mount(self) -> None:
        for key, label, width in self.COLUMNS:
            self.add_column(label, key=key, width=width)

    def sync(self, rows: Sequence[tuple[str, tuple[Cell, ...]]]) -> None:
        """Show exactly these rows, in this order, touching only cells that changed."""
        order = [key for key, _ in rows]
        if order != self._order:
            wanted, present = set(order), set(self._order)
            kept = [k for k in self._order if k in wanted]
            if kept != [k for k in order if k in present] or not self._is_append(order):
                self._rebuild(rows)
                return
            self._remove_missing(wanted)
        keys = [key for key, _, _ in self.COLUMNS]
        changed: list[tuple[str, str, Cell]] = []
        for row_key, cells in rows:
            old = self._rendered.get(row_key)
            if old is None:
                self.add_row(*cells, key=row_key)
            elif old is not cells and old != cells:
                changed.extend(
                    (row_key, keys[column], after)
                    for column, (before, after) in enumerate(zip(old, cells))
                    if before is not after and before != after
                )
            self._rendered[row_key] = cells
        self._order = order
        self._update_cells(changed)

    def _update_cells(self, changed: list[tuple[str, str, Cell]]) -> None:
        """Change cells in place with one repaint for all of them (update_cell repaints each)."""
        if not changed:
            return
        self.cell_updates += len(changed)
        data = getattr(self, "_data", None)
        if not isinstance(data, dict) or not hasattr(self, "_update_count"):
            for row_key, column_key, value in changed:
                self.update_cell(row_key, column_key, value)
            return
        for row_key, column_key, value in changed:
            data[RowKey(row_key)][ColumnKey(column_key)] = value
        self._update_count += 1
        self.refresh()

    def _is_append(self, order: list[str]) -> bool:
        """Whether the new order is the old one minus some rows plus rows at the end."""
        existing = [k for k in order if k in self._rendered]
        return order[: len(existing)] == existing

    def _remove_missing(self, keep: set[str]) -> None:
        for key in [k for k in self._order if k not in keep]:
            self.remove_row(key)
            del self._rendered[key]

    def _rebuild(self, rows: Sequence[tuple[str, tuple[Cell, ...]]]) -> None:
        cursor_key = self._cursor_key()
        self.clear()
        self._rendered = {}
        for row_key, cells in rows:
            self.add_row(*cells, key=row_key)
            self._rendered[row_key] = cells
        self._order = [key for key, _ in rows]
        self.rebuilds += 1
        if cursor_key in self._rendered:
            self.move_cursor(row=self.get_row_index(cursor_key), animate=False)

    def _cursor_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except CellDoesNotExist:
            return None

    @property
    def row_keys(self) -> list[str]:
        return list(self._order)
