"""Where node 0 keeps the other nodes' mirrored run dirs: RUN_DIR/nodes/<node>/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ddpdoctor.rundir.layout import read_json_object

NODES_DIR = "nodes"
NODE_FILE = "node.json"  # RUN_DIR/nodes/<node>/node.json: host, clock skew, lost or done
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def node_dir(run_dir: Path, node: str) -> Path:
    """The mirror dir of node ``node`` (its id made safe as a file name)."""
    return run_dir / NODES_DIR / (_SAFE.sub("_", node).strip("._") or "node")


def node_dirs(run_dir: Path) -> list[Path]:
    """The mirrored node dirs inside a run dir, in name order."""
    base = run_dir / NODES_DIR
    try:
        return sorted(p for p in base.iterdir() if p.is_dir())
    except OSError:
        return []


def read_node_file(mirror: Path) -> dict[str, Any]:
    """A mirror's node.json, or {} when missing or unreadable."""
    return read_json_object(mirror / NODE_FILE)


def with_mirrors(run_dirs: list[Path]) -> list[Path]:
    """``run_dirs`` followed by the node mirrors inside them (a rank found in both is read
    from the dir given first: a node's own run dir beats node 0's copy of it)."""
    out = list(run_dirs)
    for run_dir in run_dirs:
        out += [m for m in node_dirs(run_dir) if m not in out]
    return out
