"""This host's name as ddpdoctor stamps it, and the clock-skew hook for multi-host tests."""

from __future__ import annotations

import os
import socket
import time

HOSTNAME_ENV = "DDPDOCTOR_TEST_HOSTNAME"  # tests: two "hosts" on one machine
CLOCK_SHIFT_ENV = "DDPDOCTOR_TEST_CLOCK_SHIFT_S"  # tests: this host's clock is off by N s


def host_name() -> str:
    """The host name stamped in traces and node messages."""
    return os.environ.get(HOSTNAME_ENV) or socket.gethostname()


def apply_clock_shift() -> float:
    """Shift this process's wall clock (time.time, time.time_ns) by the seconds in
    DDPDOCTOR_TEST_CLOCK_SHIFT_S, as a host whose clock is off would be; monotonic clocks
    stay.  Returns the shift (0.0 when unset or unreadable)."""
    try:
        shift = float(os.environ.get(CLOCK_SHIFT_ENV) or 0.0)
    except ValueError:
        return 0.0
    if not shift or getattr(time, "_ddpdoctor_shifted", False):
        return shift
    shift_ns = int(shift * 1e9)
    wall, wall_ns = time.time, time.time_ns
    time.time = lambda: wall() + shift  # type: ignore[assignment]
    time.time_ns = lambda: wall_ns() + shift_ns  # type: ignore[assignment]
    time._ddpdoctor_shifted = True  # type: ignore[attr-defined]
    return shift
