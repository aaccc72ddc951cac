# SPDX-License-Identifier: LGPL-2.1-or-later
"""Time as libp3 counts it: its monotonic clock (that of Completion
timestamps), and timeouts in seconds turned into its milliseconds.
"""

from typing import Optional

from ._libp3 import _now_ns

Timeout = Optional[float]       # seconds; None blocks, 0 never blocks


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of Completion timestamps."""
    return _now_ns()


def _ms(timeout):
    if timeout is None:
        return -1
    return max(0, int(timeout * 1000 + 0.999))
