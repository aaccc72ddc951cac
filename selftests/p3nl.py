#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Raw rtnetlink requests for the p3 qdisc, bypassing tc and its plugin.

The tc plugin refuses many bad values itself, so they would never reach
the kernel.  This sends exactly the attributes given, so the tests can
check that the kernel refuses them too, and with which extack message.

  p3nl.py [-d DEV] [--handle H] [--parent P] [--kind K] [--flat]
          [--no-options] {add|change|replace|class-change} [ATTR...]
  p3nl.py [-d DEV] show

ATTR is NAME=VALUE, typed as in pkt_sched_p3.h (bands=65), or
NAME:TYPE=VALUE / NUMBER:TYPE=VALUE to send any type and size
(bands:u32=5, 9:u32=1); TYPE is u8, u16, u32, u64, or "flag" (no payload,
VALUE ignored).  --flat sends TCA_OPTIONS without NLA_F_NESTED.
class-change changes the class --handle names (a band, 1:2), with the
class attributes given by number (1:u32=2000 is a 2 ms deadline).

On a refusal it prints tc's style "Error: MSG." on stderr, then the errno
name and the attribute the kernel pointed at (NLMSGERR_ATTR_OFFS), and
exits 2, as tc does.  "show" prints the qdiscs of DEV as JSON, with p3's
options decoded from the raw attributes (type and length checked).

tdc.py imports this file for its Netlink class and link_add/link_del, to
create and delete the test device without starting a process per case.
"""

import errno
import os
import socket
import struct
import sys

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11

RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
RTM_NEWTCLASS = 40
NLMSG_ERROR = 2
NLMSG_DONE = 3

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_ROOT = 0x100
NLM_F_MATCH = 0x200
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200

NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3fff

NLMSGERR_ATTR_MSG = 1
NLMSGERR_ATTR_OFFS = 2

IFLA_IFNAME = 3
IFLA_LINKINFO = 18
IFLA_INFO_KIND = 1

TCA_KIND = 1
TCA_OPTIONS = 2

TC_H_ROOT = 0xFFFFFFFF
TC_H_UNSPEC = 0

# enum in include/uapi/linux/pkt_sched_p3.h: name -> (type, payload format)
P3_ATTRS = {
    "bands": (1, "u8"),
    "default": (2, "u8"),
    "tag": (3, "u8"),
    "limit": (4, "u32"),
    "memory": (5, "u32"),
    "quantum": (6, "u32"),
    "rate": (7, "u64"),
    "pad": (8, "u64"),
    "buckets": (9, "u32"),
    "flows": (10, "u32"),
    "dscpmap": (11, "u8x64"),
}
P3_NAMES = {t: n for n, (t, _) in P3_ATTRS.items()}
P3_TAGS = ["priority", "dscp", "mark"]
FORMATS = {"u8": "=B", "u16": "=H", "u32": "=I", "u64": "=Q", "flag": "",
           "u8x64": "=64s"}

HDR = struct.Struct("=IHHII")          # nlmsghdr
TCMSG = struct.Struct("=BxxxiIII")     # tcmsg
IFINFOMSG = struct.Struct("=BxHiII")   # ifinfomsg
NLA = struct.Struct("=HH")


def nla(atype, payload):
    hdr = NLA.pack(NLA.size + len(payload), atype)
    return hdr + payload + b"\0" * (-len(payload) % 4)


def parse_attrs(buf, base=0):
    """Yields (offset of the attribute in buf + base, type, payload)."""
    off = 0
    while off + NLA.size <= len(buf):
        alen, atype = NLA.unpack_from(buf, off)
        if alen < NLA.size or off + alen > len(buf):
            return
        yield base + off, atype, buf[off + NLA.size:off + alen]
        off += (alen + 3) & ~3


def parse_handle(s):
    if s == "root":
        return TC_H_ROOT
    if s in ("none", "0"):
        return TC_H_UNSPEC
    major, _, minor = s.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def fmt_handle(h):
    if h == TC_H_ROOT:
        return "root"
    return "%x:%s" % (h >> 16, "%x" % (h & 0xffff) if h & 0xffff else "")


def parse_attr_arg(arg):
    """NAME=VALUE or NAME:TYPE=VALUE or NUMBER:TYPE=VALUE -> (type, bytes)."""
    key, sep, value = arg.partition("=")
    if not sep:
        raise ValueError("attribute %r: expected NAME=VALUE" % arg)
    name, _, fmt = key.partition(":")
    if name in P3_ATTRS:
        atype, deffmt = P3_ATTRS[name]
    elif name.isdigit():
        atype, deffmt = int(name), None
    else:
        raise ValueError("unknown attribute name %r" % name)
    fmt = fmt or deffmt
    if fmt not in FORMATS:
        raise ValueError("attribute %r: type must be one of %s"
                         % (arg, ", ".join(FORMATS)))
    if fmt == "flag":
        return atype, b""
    if name == "tag" and value in P3_TAGS:
        value = P3_TAGS.index(value)
    return atype, struct.pack(FORMATS[fmt], int(str(value), 0))


class Netlink:
    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                  NETLINK_ROUTE)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self.sock.bind((0, 0))
        self.seq = 0

    def send(self, mtype, flags, body):
        self.seq += 1
        msg = HDR.pack(HDR.size + len(body), mtype, flags, self.seq, 0) + body
        self.sock.send(msg)
        return msg

    def recv(self):
        """Yields (type, flags, payload) of the replies to the last request."""
        while True:
            data = self.sock.recv(1 << 20)
            off = 0
            while off + HDR.size <= len(data):
                mlen, mtype, flags, seq, _ = HDR.unpack_from(data, off)
                if mlen < HDR.size:
                    return
                payload = data[off + HDR.size:off + mlen]
                off += (mlen + 3) & ~3
                if seq != self.seq:
                    continue
                yield mtype, flags, payload
                if mtype in (NLMSG_ERROR, NLMSG_DONE):
                    return


def ack_error(flags, payload, request):
    """Decodes an NLMSG_ERROR: (errno, extack message, offending attr)."""
    err = -struct.unpack_from("=i", payload)[0]
    msg, bad = None, None
    if flags & NLM_F_ACK_TLVS:
        # The request is echoed in full unless capped to its header.
        echoed = HDR.size if flags & NLM_F_CAPPED else \
            HDR.unpack_from(payload, 4)[0]
        tlvs = payload[4 + ((echoed + 3) & ~3):]
        for _, atype, data in parse_attrs(tlvs):
            if atype == NLMSGERR_ATTR_MSG:
                msg = data.rstrip(b"\0").decode()
            elif atype == NLMSGERR_ATTR_OFFS:
                bad = struct.unpack("=I", data)[0]
    return err, msg, bad


def attr_at(request, offset):
    """Name of the attribute at byte @offset of @request (ours or nested)."""
    start = HDR.size + TCMSG.size
    for aoff, atype, data in parse_attrs(request[start:], start):
        if aoff == offset:
            return {TCA_KIND: "TCA_KIND",
                    TCA_OPTIONS: "TCA_OPTIONS"}.get(atype & NLA_TYPE_MASK,
                                                    str(atype))
        if atype & NLA_TYPE_MASK == TCA_OPTIONS:
            for noff, ntype, _ in parse_attrs(data, aoff + NLA.size):
                if noff == offset:
                    name = P3_NAMES.get(ntype & NLA_TYPE_MASK)
                    return ("TCA_P3_" + name.upper() if name
                            else "nested type %d" % ntype)
    return "offset %d" % offset


def modify(nl, args):
    flags = NLM_F_REQUEST | NLM_F_ACK
    flags |= {"add": NLM_F_CREATE | NLM_F_EXCL,
              "replace": NLM_F_CREATE | NLM_F_REPLACE,
              "change": 0, "class-change": 0}[args.op]
    mtype, parent = RTM_NEWQDISC, parse_handle(args.parent)
    if args.op == "class-change":
        mtype, parent = RTM_NEWTCLASS, TC_H_UNSPEC
    opts = b"".join(nla(t, p) for t, p in map(parse_attr_arg, args.attrs))
    body = TCMSG.pack(socket.AF_UNSPEC, socket.if_nametoindex(args.dev),
                      parse_handle(args.handle), parent, 0)
    body += nla(TCA_KIND, args.kind.encode() + b"\0")
    if not args.no_options:
        body += nla(TCA_OPTIONS | (0 if args.flat else NLA_F_NESTED), opts)
    request = nl.send(mtype, flags, body)
    for mtype, mflags, payload in nl.recv():
        if mtype != NLMSG_ERROR:
            continue
        err, msg, bad = ack_error(mflags, payload, request)
        if not err:
            return 0
        if msg:
            print("Error: %s%s" % (msg, "" if msg.endswith(".") else "."),
                  file=sys.stderr)
        print("errno: %s (%s)" % (errno.errorcode.get(err, str(err)),
                                  os.strerror(err)), file=sys.stderr)
        if bad is not None:
            print("attribute: %s" % attr_at(request, bad), file=sys.stderr)
        return 2
    print("p3nl: no acknowledgement from the kernel", file=sys.stderr)
    return 1


def decode_p3(opts):
    out = {}
    for _, atype, data in parse_attrs(opts):
        name = P3_NAMES.get(atype & NLA_TYPE_MASK, str(atype))
        fmt = {1: "=B", 2: "=H", 4: "=I", 8: "=Q"}.get(len(data))
        want = P3_ATTRS.get(name, (None, None))[1]
        if want and struct.calcsize(FORMATS[want]) != len(data):
            out[name] = "bad length %d" % len(data)
        elif fmt:
            out[name] = struct.unpack(fmt, data)[0]
        else:
            out[name] = data.hex()
    return out


def show(nl, args):
    ifindex = socket.if_nametoindex(args.dev)
    body = TCMSG.pack(socket.AF_UNSPEC, ifindex, 0, 0, 0)
    nl.send(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ROOT | NLM_F_MATCH, body)
    result = []
    for mtype, _, payload in nl.recv():
        if mtype == NLMSG_ERROR:
            err = -struct.unpack_from("=i", payload)[0]
            if err:
                print("p3nl: %s" % os.strerror(err), file=sys.stderr)
                return 2
            continue
        if mtype == NLMSG_DONE:
            break
        _, idx, handle, parent, _ = TCMSG.unpack_from(payload)
        if idx != ifindex:
            continue
        q = {"handle": fmt_handle(handle), "parent": fmt_handle(parent)}
        for _, atype, data in parse_attrs(payload[TCMSG.size:]):
            if atype == TCA_KIND:
                q["kind"] = data.rstrip(b"\0").decode()
            elif atype & NLA_TYPE_MASK == TCA_OPTIONS:
                q["nested_flag"] = bool(atype & NLA_F_NESTED)
                q["options"] = data
        if q.get("kind") == "p3" and "options" in q:
            q["options"] = decode_p3(q["options"])
        elif "options" in q:
            q["options"] = q["options"].hex()
        result.append(q)
    import json     # only here: python starts slowly under QEMU's TCG
    print(json.dumps(result, sort_keys=True))
    return 0


def link_add(nl, name, kind="dummy"):
    """Creates a link (ip link add dev NAME type KIND); errno or 0."""
    info = nla(IFLA_INFO_KIND, kind.encode())
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    body += nla(IFLA_IFNAME, name.encode() + b"\0")
    body += nla(IFLA_LINKINFO | NLA_F_NESTED, info)
    return request(nl, RTM_NEWLINK,
                   NLM_F_CREATE | NLM_F_EXCL, body)


def link_del(nl, name):
    """Deletes a link and everything attached to it; errno or 0."""
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    body += nla(IFLA_IFNAME, name.encode() + b"\0")
    return request(nl, RTM_DELLINK, 0, body)


def request(nl, mtype, flags, body):
    """Sends a request and returns its acknowledgement's errno (0 = ok)."""
    nl.send(mtype, NLM_F_REQUEST | NLM_F_ACK | flags, body)
    for rtype, _, payload in nl.recv():
        if rtype == NLMSG_ERROR:
            return -struct.unpack_from("=i", payload)[0]
    return errno.EPROTO


USAGE = """usage: p3nl.py [-d DEV] [--handle H] [--parent P] [--kind K] [--flat]
                [--no-options] {add|change|replace} [ATTR...]
       p3nl.py [-d DEV] show
       p3nl.py [-d DEV] --handle CLASSID [--no-options] class-change [ATTR...]"""


class Args:
    dev = os.environ.get("DEV", "p3d0")
    handle = "1:"
    parent = "root"
    kind = "p3"
    flat = False
    no_options = False
    op = None

    def __init__(self, argv):
        self.attrs = []
        valued = {"-d": "dev", "--dev": "dev", "--handle": "handle",
                  "--parent": "parent", "--kind": "kind"}
        argv = list(argv)
        while argv:
            a = argv.pop(0)
            if a in ("-h", "--help"):
                print(USAGE + "\n" + __doc__)
                sys.exit(0)
            elif a in valued:
                if not argv:
                    raise ValueError("%s needs a value" % a)
                setattr(self, valued[a], argv.pop(0))
            elif a == "--flat":
                self.flat = True
            elif a == "--no-options":
                self.no_options = True
            elif a.startswith("-"):
                raise ValueError("unknown option %s" % a)
            elif self.op is None:
                if a not in ("add", "change", "replace", "show",
                             "class-change"):
                    raise ValueError("unknown operation %r" % a)
                self.op = a
            else:
                self.attrs.append(a)
        if self.op is None:
            raise ValueError("no operation given")


def main():
    try:
        args = Args(sys.argv[1:])
    except ValueError as e:
        print("p3nl: %s\n%s" % (e, USAGE), file=sys.stderr)
        return 1
    try:
        if args.op != "show":
            for a in args.attrs:
                parse_attr_arg(a)
        nl = Netlink()
        return show(nl, args) if args.op == "show" else modify(nl, args)
    except (ValueError, OSError, struct.error) as e:
        print("p3nl: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
