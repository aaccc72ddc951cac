# SPDX-License-Identifier: LGPL-2.1-or-later
"""torchrun that starts on Debian 12: ``python3 -m p3.torch.run`` (or the
``p3torchrun`` command) takes torchrun's arguments and runs torchrun.

torch 1.13's torchrun parses ``--redirects``/``--tee`` (default ``0``) by
iterating the ``Std`` IntFlag for a member equal to the value.  Python 3.11
iterates only single-bit members, so ``0`` (NONE) and ``3`` (ALL) come out
as None and the agent dies before starting a worker (``'NoneType' object
has no attribute 'get'``).  Here they are parsed with ``Std(int(v))``, so
every documented value works, the default included; on a torch or Python
without the fault nothing is changed.
"""
import re
import sys

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing import api


def _std_from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(':') for m in vm.split(','))}
    raise ValueError('%s does not match: <%s> or <%s>'
                     % (vm, api._VALUE_REGEX, api._MAPPING_REGEX))


def fix_std_parsing():
    """Mend Std.from_str where it loses NONE and ALL; True if it had to."""
    if api.Std.from_str('0') is api.Std.NONE and api.Std.from_str('3') is api.Std.ALL:
        return False
    api.Std.from_str = classmethod(_std_from_str)
    return True


def main(argv=None):
    fix_std_parsing()
    torchrun.main(sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    main()
