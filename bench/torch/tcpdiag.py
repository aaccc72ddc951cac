# SPDX-License-Identifier: GPL-2.0
"""How long TCP spent recovering from retransmission timeouts, summed
over this network namespace's TCP sockets, from the kernel's socket
dump (sock_diag, the netlink interface `ss` reads).

The netstat counters say how many timeouts fired; since Linux 6.7 each
socket's tcp_info also says how long its recoveries lasted
(tcpi_total_rto_time, an unfinished one included), which is the time a
flow sent nothing new.  bench/torch snapshots the sum at each step's
start.
"""
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLMSG_HDR = struct.Struct('=IHHII')
RTA_HDR = struct.Struct('=HH')
INET_DIAG_INFO = 2
INET_DIAG_MSG = 72      # struct inet_diag_msg, before its attributes
# struct tcp_info (include/uapi/linux/tcp.h): tcpi_total_rto (__u16),
# tcpi_total_rto_recoveries (__u16), tcpi_total_rto_time (__u32, ms).
RTO_INFO = struct.Struct('=HHI')
RTO_AT = 240
# tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited (__u64, µs):
# how long the socket had data unacknowledged or unsent, and of that how
# long the peer's window or the send buffer held it back.
CHRONO_INFO = struct.Struct('=QQQ')
CHRONO_AT = 168


def align(n):
    return (n + 3) & ~3


def request(family):
    """A dump of every TCP socket of family, with its tcp_info:
    struct inet_diag_req_v2, all states, an empty socket id."""
    req = struct.pack('=BBBxI', family, socket.IPPROTO_TCP,
                      1 << (INET_DIAG_INFO - 1), 0xffffffff) + bytes(48)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(req), SOCK_DIAG_BY_FAMILY,
                          NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req


def tcp_infos(family):
    """Each socket's tcp_info bytes (sockets without one, in TIME_WAIT,
    are left out)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                       NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        nl.send(request(family))
        while True:
            data = nl.recv(1 << 20)
            at = 0
            while at + NLMSG_HDR.size <= len(data):
                length, kind = NLMSG_HDR.unpack_from(data, at)[:2]
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    err = struct.unpack_from('=i', data, at + NLMSG_HDR.size)[0]
                    raise OSError(-err, 'sock_diag dump failed')
                end = at + length
                attr = at + NLMSG_HDR.size + INET_DIAG_MSG
                while attr + RTA_HDR.size <= end:
                    size, kind = RTA_HDR.unpack_from(data, attr)
                    if size < RTA_HDR.size:
                        break
                    if kind == INET_DIAG_INFO:
                        yield data[attr + RTA_HDR.size:attr + size]
                    attr += align(size)
                at += align(length)


def rto_totals():
    """{'sockets', 'rto', 'rto_ms', 'busy_us', 'rwnd_us', 'sndbuf_us'}:
    TCP sockets, their timeouts and the milliseconds they spent
    recovering from them, and their busy, receive-window-limited and
    send-buffer-limited microseconds, summed over IPv4 and IPv6; None
    where tcp_info has no timeout fields (before Linux 6.7)."""
    total = dict.fromkeys(('sockets', 'rto', 'rto_ms', 'busy_us', 'rwnd_us',
                           'sndbuf_us'), 0)
    for family in (socket.AF_INET, socket.AF_INET6):
        for info in tcp_infos(family):
            if len(info) < RTO_AT + RTO_INFO.size:
                return None
            rto, _, ms = RTO_INFO.unpack_from(info, RTO_AT)
            busy, rwnd, sndbuf = CHRONO_INFO.unpack_from(info, CHRONO_AT)
            total['sockets'] += 1
            total['rto'] += rto
            total['rto_ms'] += ms
            total['busy_us'] += busy
            total['rwnd_us'] += rwnd
            total['sndbuf_us'] += sndbuf
    return total
