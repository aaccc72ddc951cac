# SPDX-License-Identifier: LGPL-2.1-or-later
"""Can this process's tags reach the host's qdisc?

The kernel clears skb->priority and skb->mark when a packet leaves its
network namespace through a veth pair (the way out of a container), so
`tag priority` / `tag mark` on the host never see a container's tags;
DSCP survives.  A namespace whose default route leaves through a veth is
taken to be such a container: a host's own default route leaves through
its NIC.
"""
import ctypes
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 3
DRVINFO_SIZE = 196      # struct ethtool_drvinfo
IFREQ_SIZE = 40


def default_route_devices():
    """Devices of this namespace's IPv4 and IPv6 default routes."""
    devs = []
    try:
        with open('/proc/net/route') as f:
            for line in f.readlines()[1:]:
                col = line.split()
                if len(col) > 7 and col[1] == '00000000' and col[7] == '00000000':
                    devs.append(col[0])
    except OSError:
        pass
    try:
        with open('/proc/net/ipv6_route') as f:
            for line in f:
                col = line.split()
                if len(col) == 10 and col[0] == '0' * 32 and col[1] == '00' \
                        and col[9] != 'lo':
                    devs.append(col[9])
    except OSError:
        pass
    return sorted(set(devs))


def driver(dev):
    """The device's driver name (ETHTOOL_GDRVINFO needs no privilege),
    or None."""
    info = ctypes.create_string_buffer(struct.pack('I', ETHTOOL_GDRVINFO),
                                       DRVINFO_SIZE)
    ifr = struct.pack('16sP', dev.encode()[:15], ctypes.addressof(info))
    ifr += bytes(IFREQ_SIZE - len(ifr))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifr)
    except OSError:
        return None
    return info.raw[4:36].split(b'\0', 1)[0].decode(errors='replace')


def leaves_by_veth():
    """The veth a default route leaves through, or None."""
    for dev in default_route_devices():
        if driver(dev) == 'veth':
            return dev
    return None
