"""The errors a rank gets because a peer is absent (gone, or not answering in time).

The one place where an error's text is classified as "raised by a peer's absence"."""

from __future__ import annotations

import re

# Errors a rank gets because a peer is absent (gone, or not answering in time).
PEER_ABSENCE = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Connection refused|"
    r"Socket Timeout|Timed out|timed out|timeout|ProcessGroupGloo.*(closed|abort)|"
    r"NCCL communicator was aborted|Watchdog caught|Rank \d+ is not|peer|recvBytes|sendBytes",
    re.IGNORECASE)
# Transport errors that only a peer's end (death or abort) raises: a consequence even when
# no recorded call failed (the reducer's or the store's own traffic).
PEER_GONE = re.compile(r"Connection (closed|reset) by peer|Read error \[|Broken pipe|"
                       r"ProcessGroupGloo.*(closed|abort)|NCCL communicator was aborted")


def peer_absence(text: str) -> bool:
    """Was this error raised because a peer was absent (closed, reset, timed out)?"""
    return bool(PEER_ABSENCE.search(text))
