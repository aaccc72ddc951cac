# SPDX-License-Identifier: LGPL-2.1-or-later
"""The close() protocol the package's handles share (channels,
listeners, datagram endpoints): a with-block or the garbage collector
closes what the caller did not.
"""

from typing import Any


class _Closing:
    """An object with close(): a with-block closes it, and so does the
    garbage collector, quietly, if nothing did."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
