# SPDX-License-Identifier: LGPL-2.1-or-later
"""What p3.torch raises when the exchange cannot go on."""


class PeerError(ConnectionError):
    """A peer left, broke its connection or sent something wrong."""


class StepTimeout(TimeoutError):
    """A step's gradients did not arrive within the timeout."""
