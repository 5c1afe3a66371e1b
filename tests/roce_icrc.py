#!/usr/bin/env python3
"""Checks the ICRC of every RoCEv2 frame in a capture, independently of softrdma.

    roce_icrc.py [-v] [--split OUT.pcap] [--min-frames N] CAPTURE
    roce_icrc.py --self-test [CAPTURE]

CAPTURE is a pcap or pcapng file (what dumpcap or tshark write); link types
Ethernet (what Linux gives for lo), Linux cooked (v1, v2) and raw IP are
understood. Every IPv4/IPv6 UDP datagram to port 4791 is a RoCEv2 frame:
BTH, extended headers, payload, pad, then the 4-byte ICRC.

The ICRC (IBTA vol. 1 Annex A17.4; Linux rxe_icrc.c computes the same) is
CRC-32 with the IEEE polynomial, i.e. zlib.crc32, over
    8 bytes 0xff                      (stands in for the LRH)
    the IP header with the fields a router may change set to all ones:
        IPv4: TOS (DSCP+ECN), TTL, header checksum
        IPv6: traffic class, flow label, hop limit
    the UDP header with its checksum set to 0xffff
    the BTH with byte 4 (F/BECN, B/FECN, Resv6) set to 0xff
    the rest of the frame up to, not including, the ICRC,
and it is stored little-endian.

UDP GSO. A capture on lo (or on a sender whose NIC segments) holds what the
sending socket handed down: one IP datagram that the stack later cuts into
segments of gso_size bytes of UDP payload (the last one may be shorter),
each its own UDP datagram and its own RoCEv2 frame, with the IPv4
Identification counting up from the datagram's (Linux inet_gso_segment).
The capture does not record gso_size, so this script finds it: a cut is a
place where another BTH starts (a valid RC opcode, TVer 0, the same P_Key
and destination QP, a PSN a little ahead), and among the cuts that fit it
prefers the one whose every segment's ICRC is right. Each segment is then
checked as the frame it becomes on a wire. A datagram that cannot be cut is
checked whole.

--split OUT.pcap writes every frame as it would be on a wire (GSO datagrams
cut into their segments, with their own IPv4 length, Identification and
header checksum, UDP length, UDP checksum 0), Ethernet link type, for a
dissector to read packet by packet.

Prints one line per bad frame (-v: one per frame), then a summary. Exit
status: 0 every ICRC right; 1 any ICRC wrong or any RoCEv2 frame that cannot
be checked; 2 the capture cannot be read, or holds fewer than --min-frames
(default 1) RoCEv2 frames.

--self-test checks the checker: a frame captured on real hardware (a
ConnectX-4 Lx CNP, from scapy's test/contrib/roce.uts) has the right ICRC;
flipping any bit the ICRC covers makes it wrong; changing a masked field
does not. With CAPTURE, the same on every frame of it, and a bit flipped in
one segment of a GSO datagram is found through the whole pipeline.

Python 3 standard library only.
"""

import argparse
import random
import struct
import sys
import zlib

ROCE_PORT = 4791

# RC opcodes (IBA 9.2; include/rdma/ib_pack.h) and the extended headers'
# length after the BTH.
RC_OPCODES = {
    0x00: ("SEND_FIRST", 0),
    0x01: ("SEND_MIDDLE", 0),
    0x02: ("SEND_LAST", 0),
    0x03: ("SEND_LAST_IMM", 4),
    0x04: ("SEND_ONLY", 0),
    0x05: ("SEND_ONLY_IMM", 4),
    0x06: ("WRITE_FIRST", 16),
    0x07: ("WRITE_MIDDLE", 0),
    0x08: ("WRITE_LAST", 0),
    0x09: ("WRITE_LAST_IMM", 4),
    0x0A: ("WRITE_ONLY", 16),
    0x0B: ("WRITE_ONLY_IMM", 20),
    0x0C: ("READ_REQUEST", 16),
    0x0D: ("READ_RESPONSE_FIRST", 4),
    0x0E: ("READ_RESPONSE_MIDDLE", 0),
    0x0F: ("READ_RESPONSE_LAST", 4),
    0x10: ("READ_RESPONSE_ONLY", 4),
    0x11: ("ACKNOWLEDGE", 4),
    0x12: ("ATOMIC_ACKNOWLEDGE", 12),
    0x13: ("COMPARE_SWAP", 28),
    0x14: ("FETCH_ADD", 28),
    0x16: ("SEND_LAST_INV", 4),
    0x17: ("SEND_ONLY_INV", 4),
}
BTH_BYTES = 12
ICRC_BYTES = 4
MIN_FRAME = BTH_BYTES + ICRC_BYTES


def is_response(op):
    """READ responses, ACKs and atomic ACKs (0x0D .. 0x12)."""
    return 0x0D <= op <= 0x12


def opcode_name(op):
    if op in RC_OPCODES:
        return RC_OPCODES[op][0]
    return "0x%02x" % op


# ---------------------------------------------------------------- captures


class CaptureError(Exception):
    pass


LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276


def read_capture(path):
    """Returns a list of packets: dicts with number, ts (seconds, float),
    ts_raw (seconds, nanoseconds), linktype, data, orig_len."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 4:
        raise CaptureError("%s: %d bytes: not a capture" % (path, len(blob)))
    magic = blob[:4]
    if magic == b"\x0a\x0d\x0d\x0a":
        return _read_pcapng(path, blob)
    return _read_pcap(path, blob)


def _read_pcap(path, blob):
    if len(blob) < 24:
        raise CaptureError("%s: truncated pcap header" % path)
    m = struct.unpack("<I", blob[:4])[0]
    if m in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    elif m in (0xD4C3B2A1, 0x4D3CB2A1):
        e = ">"
        m = struct.unpack(">I", blob[:4])[0]
    else:
        raise CaptureError("%s: neither pcap nor pcapng (magic %s)" % (path, blob[:4].hex()))
    nano = m == 0xA1B23C4D
    linktype = struct.unpack(e + "I", blob[20:24])[0] & 0x0FFFFFFF
    out = []
    off = 24
    n = 0
    while off < len(blob):
        if off + 16 > len(blob):
            raise CaptureError("%s: truncated record header at byte %d" % (path, off))
        sec, frac, incl, orig = struct.unpack(e + "IIII", blob[off:off + 16])
        off += 16
        if off + incl > len(blob):
            raise CaptureError("%s: truncated record at byte %d" % (path, off))
        n += 1
        ns = frac if nano else frac * 1000
        out.append({"number": n, "ts_raw": (sec, ns), "linktype": linktype,
                    "data": blob[off:off + incl], "orig_len": orig})
        off += incl
    return out


def _read_pcapng(path, blob):
    out = []
    off = 0
    e = "<"
    interfaces = []  # (linktype, ticks per second) per interface, per section
    n = 0
    while off < len(blob):
        if off + 12 > len(blob):
            raise CaptureError("%s: truncated block at byte %d" % (path, off))
        btype = struct.unpack(e + "I", blob[off:off + 4])[0]
        if btype == 0x0A0D0D0A:  # section header: the byte order starts here
            bom = blob[off + 8:off + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                e = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                e = ">"
            else:
                raise CaptureError("%s: bad pcapng byte-order magic" % path)
            interfaces = []
        blen = struct.unpack(e + "I", blob[off + 4:off + 8])[0]
        if blen < 12 or blen % 4 or off + blen > len(blob):
            raise CaptureError("%s: bad pcapng block length %d at byte %d" % (path, blen, off))
        body = blob[off + 8:off + blen - 4]
        if btype == 1:  # interface description
            linktype = struct.unpack(e + "H", body[:2])[0]
            tsresol = 1000000
            opt = 8
            while opt + 4 <= len(body):
                code, olen = struct.unpack(e + "HH", body[opt:opt + 4])
                if code == 0:
                    break
                if code == 9 and olen >= 1:
                    r = body[opt + 4]
                    tsresol = (2 ** (r & 0x7F)) if r & 0x80 else (10 ** r)
                opt += 4 + ((olen + 3) & ~3)
            interfaces.append((linktype, tsresol))
        elif btype in (6, 2):  # enhanced packet; obsolete packet
            if btype == 6:
                ifid, tsh, tsl, incl, orig = struct.unpack(e + "IIIII", body[:20])
            else:
                ifid, _drops, tsh, tsl, incl, orig = struct.unpack(e + "HHIIII", body[:20])
            if ifid >= len(interfaces):
                raise CaptureError("%s: packet on unknown interface %d" % (path, ifid))
            linktype, tsresol = interfaces[ifid]
            ticks = (tsh << 32) | tsl
            n += 1
            sec = ticks // tsresol
            ns = (ticks % tsresol) * 1000000000 // tsresol
            out.append({"number": n, "ts_raw": (sec, ns), "linktype": linktype,
                        "data": body[20:20 + incl], "orig_len": orig})
        elif btype == 3:  # simple packet
            if not interfaces:
                raise CaptureError("%s: simple packet before any interface" % path)
            orig = struct.unpack(e + "I", body[:4])[0]
            n += 1
            out.append({"number": n, "ts_raw": (0, 0), "linktype": interfaces[0][0],
                        "data": body[4:4 + orig], "orig_len": orig})
        off += blen
    return out


def network_layer(linktype, data):
    """(ethertype, offset of the IP header) or None for what is not IP."""
    if linktype == LINKTYPE_ETHERNET:
        if len(data) < 14:
            return None
        off = 12
        etype = struct.unpack("!H", data[off:off + 2])[0]
        off += 2
        while etype in (0x8100, 0x88A8, 0x9100) and len(data) >= off + 4:
            etype = struct.unpack("!H", data[off + 2:off + 4])[0]
            off += 4
        return etype, off
    if linktype == LINKTYPE_LINUX_SLL:
        if len(data) < 16:
            return None
        return struct.unpack("!H", data[14:16])[0], 16
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(data) < 20:
            return None
        return struct.unpack("!H", data[0:2])[0], 20
    if linktype in (LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not data:
            return None
        v = data[0] >> 4
        return (0x0800 if v == 4 else 0x86DD if v == 6 else 0), 0
    if linktype == LINKTYPE_NULL:
        if len(data) < 4:
            return None
        v = data[4] >> 4 if len(data) > 4 else 0
        return (0x0800 if v == 4 else 0x86DD if v == 6 else 0), 4
    return None


# ---------------------------------------------------------------- the ICRC


def masked_ip_header(ip):
    """The IP header as the ICRC sees it."""
    h = bytearray(ip)
    if (h[0] >> 4) == 4:
        h[1] = 0xFF            # TOS: DSCP and ECN
        h[8] = 0xFF            # TTL
        h[10:12] = b"\xff\xff"  # header checksum
    else:
        h[0] |= 0x0F           # traffic class, high nibble
        h[1:4] = b"\xff\xff\xff"  # traffic class low nibble, flow label
        h[7] = 0xFF            # hop limit
    return bytes(h)


def icrc(ip, udp, frame_without_icrc):
    """The ICRC of a RoCEv2 frame: ip is its IP header (20 or 40 bytes, as
    on the wire), udp its UDP header, frame_without_icrc the UDP payload up
    to the ICRC. The value whose little-endian bytes end the frame."""
    u = bytearray(udp)
    u[6:8] = b"\xff\xff"
    bth = bytearray(frame_without_icrc[:BTH_BYTES])
    bth[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8)
    crc = zlib.crc32(masked_ip_header(ip), crc)
    crc = zlib.crc32(bytes(u), crc)
    crc = zlib.crc32(bytes(bth), crc)
    crc = zlib.crc32(frame_without_icrc[BTH_BYTES:], crc)
    return crc & 0xFFFFFFFF


def wire_icrc(frame):
    return struct.unpack("<I", frame[-ICRC_BYTES:])[0]


def ipv4_checksum(h):
    s = 0
    for i in range(0, len(h), 2):
        s += (h[i] << 8) | h[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def segment_headers(ip, udp, seg_len, index):
    """IP and UDP headers of GSO segment `index` (0-based) carrying seg_len
    bytes of UDP payload, as the kernel writes them."""
    h = bytearray(ip)
    if (h[0] >> 4) == 4:
        struct.pack_into("!H", h, 2, len(h) + 8 + seg_len)
        ident = struct.unpack("!H", h[4:6])[0]
        struct.pack_into("!H", h, 4, (ident + index) & 0xFFFF)
        h[10:12] = b"\x00\x00"
        struct.pack_into("!H", h, 10, ipv4_checksum(bytes(h)))
    else:
        struct.pack_into("!H", h, 4, 8 + seg_len)
    u = bytearray(udp)
    struct.pack_into("!H", u, 4, 8 + seg_len)
    u[6:8] = b"\x00\x00"
    return bytes(h), bytes(u)


# ---------------------------------------------------------------- frames


class Bth:
    __slots__ = ("opcode", "tver", "padcnt", "pkey", "destqp", "ackreq", "psn")

    def __init__(self, b):
        self.opcode = b[0]
        self.padcnt = (b[1] >> 4) & 3
        self.tver = b[1] & 0x0F
        self.pkey = struct.unpack("!H", b[2:4])[0]
        self.destqp = struct.unpack("!I", b[4:8])[0] & 0xFFFFFF
        self.ackreq = b[8] >> 7
        self.psn = struct.unpack("!I", b[8:12])[0] & 0xFFFFFF


def _bth_continues(p, off, first, index):
    """Whether a BTH that can follow `first` within one GSO datagram starts
    at p[off]: a known RC opcode, TVer 0, the same P_Key and QP, a PSN at
    most a window ahead (READ requests advance it by their length in
    packets, responses carry their request's PSN)."""
    if off + MIN_FRAME > len(p):
        return False
    if p[off] not in RC_OPCODES or (p[off + 1] & 0x0F) != 0:
        return False
    b = Bth(p[off:off + BTH_BYTES])
    if b.pkey != first.pkey or b.destqp != first.destqp:
        return False
    if is_response(b.opcode) != is_response(first.opcode):
        # An answer the sender owed that QP, behind its own requests: its
        # PSN is the other direction's (each segment's ICRC still decides).
        return True
    ahead = (b.psn - first.psn) % (1 << 24)
    return ahead < 65536


def candidate_cuts(p):
    """Segment sizes that cut UDP payload p into BTH-led frames."""
    if len(p) < 2 * MIN_FRAME or p[0] not in RC_OPCODES:
        return []
    first = Bth(p[:BTH_BYTES])
    qpn = p[5:8]
    cuts = []
    pos = p.find(qpn, MIN_FRAME + 5)
    while pos >= 0:
        s = pos - 5
        if s % 4 == 0 and _bth_continues(p, s, first, 1):
            nseg = -(-len(p) // s)
            last = len(p) - (nseg - 1) * s
            if last >= MIN_FRAME and all(_bth_continues(p, i * s, first, i) for i in range(2, nseg)):
                cuts.append(s)
        pos = p.find(qpn, pos + 1)
    return cuts


def describe(seg):
    b = Bth(seg[:BTH_BYTES]) if len(seg) >= BTH_BYTES else None
    if b is None:
        return "(%d bytes, no BTH)" % len(seg)
    return "%s psn %d qp 0x%06x, %d bytes" % (opcode_name(b.opcode), b.psn, b.destqp, len(seg))


def datagrams(packets):
    """Yields, for every packet:
        ("roce", packet, ip header, udp header, udp payload) for a UDP
            datagram to the RoCEv2 port (the IP length bounds the payload);
        ("bad", packet, reason) for one to that port that cannot be read;
        ("other", packet, ethertype, bytes from the IP header on) for any
            other IP packet; nothing for what is not IP."""
    for pkt in packets:
        nl = network_layer(pkt["linktype"], pkt["data"])
        if nl is None:
            continue
        etype, off = nl
        d = pkt["data"]
        other = ("other", pkt, etype, d[off:])
        if etype == 0x0800:
            if len(d) < off + 20 or d[off + 9] != 17:
                yield other
                continue
            ihl = (d[off] & 0x0F) * 4
            ip = d[off:off + 20]
            uoff = off + ihl
            end = off + struct.unpack("!H", d[off + 2:off + 4])[0]
            fragmented = struct.unpack("!H", d[off + 6:off + 8])[0] & 0x3FFF
        elif etype == 0x86DD:
            if len(d) < off + 40 or d[off + 6] != 17:
                yield other  # extension headers: not what a RoCEv2 sender writes
                continue
            ip = d[off:off + 40]
            ihl = 40
            uoff = off + 40
            end = uoff + struct.unpack("!H", d[off + 4:off + 6])[0]
            fragmented = 0
        else:
            yield other
            continue
        if len(d) < uoff + 8:
            yield other
            continue
        sport, dport, ulen = struct.unpack("!HHH", d[uoff:uoff + 6])
        if dport != ROCE_PORT:
            yield other
            continue
        if pkt["orig_len"] > len(d):
            yield "bad", pkt, "captured %d of %d bytes (snap length)" % (len(d), pkt["orig_len"])
        elif etype == 0x0800 and ihl != 20:
            yield "bad", pkt, "IPv4 header of %d bytes: RoCEv2 frames carry no IP options" % ihl
        elif fragmented:
            yield "bad", pkt, "an IP fragment"
        elif end > len(d) or uoff + ulen > end or ulen < 8:
            yield "bad", pkt, "IP length %d / UDP length %d do not fit the %d captured bytes" % (
                end - off, ulen, len(d) - off)
        else:
            # A GSO datagram's UDP length may be the segment's or the whole: the IP length rules.
            yield "roce", pkt, ip, d[uoff:uoff + 8], d[uoff + 8:end]


def roce_datagrams(packets):
    """(packet, ip, udp, payload) of every RoCEv2 datagram that can be read."""
    for item in datagrams(packets):
        if item[0] == "roce":
            yield item[1:]


def cut(ip, udp, payload):
    """The frames a RoCEv2 datagram holds: [payload] when it is one frame,
    its GSO segments when it is a GSO datagram, None when it is one frame
    whose ICRC is wrong and cannot be cut."""
    if len(payload) >= MIN_FRAME and icrc(ip, udp, payload[:-ICRC_BYTES]) == wire_icrc(payload):
        return [payload]
    cuts = candidate_cuts(payload)
    for s in cuts:
        parts = [payload[i:i + s] for i in range(0, len(payload), s)]
        if all(icrc(*segment_headers(ip, udp, len(x), i), x[:-ICRC_BYTES]) == wire_icrc(x)
               for i, x in enumerate(parts)):
            return parts
    if cuts:  # wrong somewhere: check it as cut where the BTHs say
        return [payload[i:i + cuts[0]] for i in range(0, len(payload), cuts[0])]
    return None


def check_capture(packets, verbose=False, out=sys.stdout, split_records=None):
    """Checks every RoCEv2 frame. Returns (frames checked, failures, GSO
    datagrams). split_records, when a list, receives every packet as it is
    on a wire: ("frame", ts, ip, udp, payload) for each RoCEv2 frame (a GSO
    datagram's segments with their own headers), ("raw", ts, ethertype,
    bytes) for any other IP packet."""
    frames = 0
    failures = 0
    gso = 0
    for item in datagrams(packets):
        kind, pkt = item[0], item[1]
        if kind == "other":
            if split_records is not None:
                split_records.append(("raw", pkt["ts_raw"], item[2], item[3]))
            continue
        if kind == "bad":
            failures += 1
            print("frame %d: cannot check: %s" % (pkt["number"], item[2]), file=out)
            continue
        ip, udp, payload = item[2:]
        segs = cut(ip, udp, payload)
        if segs is None or len(segs) == 1:
            frames += 1
            name = "frame %d" % pkt["number"]
            if len(payload) < MIN_FRAME:
                failures += 1
                print("%s: %d bytes of UDP payload: shorter than BTH + ICRC" % (name, len(payload)), file=out)
            elif segs is None:
                failures += 1
                report_mismatch(name, ip, udp, payload, out)
            elif verbose:
                print("%s: %s: ICRC 0x%08x right" % (name, describe(payload), wire_icrc(payload)), file=out)
            if split_records is not None:
                split_records.append(("frame", pkt["ts_raw"], ip, udp, payload))
            continue
        gso += 1
        for i, seg in enumerate(segs):
            frames += 1
            name = "frame %d segment %d/%d (GSO size %d)" % (pkt["number"], i + 1, len(segs), len(segs[0]))
            sip, sudp = segment_headers(ip, udp, len(seg), i)
            if icrc(sip, sudp, seg[:-ICRC_BYTES]) != wire_icrc(seg):
                failures += 1
                report_mismatch(name, sip, sudp, seg, out)
            elif verbose:
                print("%s: %s: ICRC 0x%08x right" % (name, describe(seg), wire_icrc(seg)), file=out)
            if split_records is not None:
                split_records.append(("frame", pkt["ts_raw"], sip, sudp, seg))
    return frames, failures, gso


_reported = [0]


def report_mismatch(name, ip, udp, frame, out):
    got = wire_icrc(frame)
    want = icrc(ip, udp, frame[:-ICRC_BYTES])
    line = "%s: ICRC WRONG: %s; on the wire %s (0x%08x little-endian), computed 0x%08x (wire bytes %s)" % (
        name, describe(frame), frame[-4:].hex(), got, want, struct.pack("<I", want).hex())
    if len(ip) == 20:
        line += ", IPv4 ID %d" % struct.unpack("!H", ip[4:6])[0]
    print(line, file=out)
    _reported[0] += 1
    if _reported[0] > 5:
        return
    # Diagnostics: which Identification, or which byte order, would match.
    if len(ip) == 20:
        # The CRC is affine in its input: the ICRC with Identification x is
        # the one with 0 XOR the changes each of x's bits makes.
        h = bytearray(ip)
        h[4:6] = b"\x00\x00"
        zero = icrc(bytes(h), udp, frame[:-ICRC_BYTES])
        deltas = []
        for k in range(16):
            struct.pack_into("!H", h, 4, 1 << k)
            deltas.append(icrc(bytes(h), udp, frame[:-ICRC_BYTES]) ^ zero)
        for ident in range(65536):
            c = zero
            for k in range(16):
                if ident >> k & 1:
                    c ^= deltas[k]
            if c == got:
                print("    (the wire ICRC is right for IPv4 Identification %d)" % ident, file=out)
                break
    if struct.unpack(">I", frame[-4:])[0] == want:
        print("    (the wire ICRC is the right value stored big-endian)", file=out)
    print("    IP  %s\n    UDP %s\n    frame %s" % (ip.hex(), udp.hex(), frame.hex() if len(frame) <= 128
                                                      else frame[:96].hex() + "..." + frame[-16:].hex()), file=out)


def write_pcap(path, records):
    """Classic pcap, nanosecond timestamps, Ethernet (addresses zero)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, LINKTYPE_ETHERNET))
        for rec in records:
            (sec, ns) = rec[1]
            if rec[0] == "frame":
                ip, udp, payload = rec[2:]
                etype = 0x0800 if (ip[0] >> 4) == 4 else 0x86DD
                l3 = ip + udp + payload
            else:
                etype, l3 = rec[2], rec[3]
            data = b"\x00" * 12 + struct.pack("!H", etype) + l3
            f.write(struct.pack("<IIII", sec, ns, len(data), len(data)))
            f.write(data)


# ---------------------------------------------------------------- self-test

# A CNP captured on a ConnectX-4 Lx (scapy, test/contrib/roce.uts): real
# hardware's ICRC, with TOS 0xc2 and BTH byte 4 = 0x40 (BECN) under the
# masks, IPv4 Identification 0x718c.
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b320800"                  # Ethernet
    "45c2003c718c400040119161 0a001101 0a001201"    # IPv4
    "000012b700280000"                              # UDP, checksum 0
    "8100ffff40000118 00000000"                     # BTH: CNP, BECN, QP 0x118
    "00000000000000000000000000000000"              # CNP reserved
    "82fd002a".replace(" ", ""))                    # ICRC

# The IPv4 bytes the ICRC covers / masks; UDP; BTH (offsets inside each).
IP_COVERED = [0, 2, 3, 4, 5, 6, 7, 9, 12, 13, 14, 15, 16, 17, 18, 19]
IP_MASKED = [1, 8, 10, 11]
IP6_MASKED = [1, 2, 3, 7]  # plus the low nibble of byte 0
UDP_COVERED = [0, 1, 2, 3, 4, 5]
UDP_MASKED = [6, 7]
BTH_MASKED = [4]


def segment_mutations_ok(ip, udp, frame, rng, errors, name):
    """Flips a bit in every covered byte of one frame (must be caught) and
    rewrites every masked byte (must not matter). Returns mutations tried."""
    base = icrc(ip, udp, frame[:-ICRC_BYTES])
    if base != wire_icrc(frame):
        errors.append("%s: ICRC wrong before any mutation" % name)
        return 0
    tried = 0
    v4 = (ip[0] >> 4) == 4

    def bad(i2, u2, f2):
        return icrc(i2, u2, f2[:-ICRC_BYTES]) != wire_icrc(f2)

    covered_ip = IP_COVERED if v4 else [0] + list(range(4, 7)) + list(range(8, 40))
    for off in covered_ip:
        h = bytearray(ip)
        h[off] ^= (0x10 if (off == 0 and not v4) else 1 << rng.randrange(8))
        tried += 1
        if not bad(bytes(h), udp, frame):
            errors.append("%s: flipping IP byte %d went unnoticed" % (name, off))
    for off in UDP_COVERED:
        u = bytearray(udp)
        u[off] ^= 1 << rng.randrange(8)
        tried += 1
        if not bad(ip, bytes(u), frame):
            errors.append("%s: flipping UDP byte %d went unnoticed" % (name, off))
    positions = [o for o in range(len(frame)) if o != 4]
    if len(positions) > 64:  # every header byte, the ICRC, and a sample of the payload
        positions = list(range(0, 4)) + list(range(5, 48)) + rng.sample(range(48, len(frame) - 4), 12) \
            + list(range(len(frame) - 4, len(frame)))
    for off in positions:
        f2 = bytearray(frame)
        f2[off] ^= 1 << rng.randrange(8)
        tried += 1
        if not bad(ip, udp, bytes(f2)):
            errors.append("%s: flipping frame byte %d went unnoticed" % (name, off))
    masked_ip = IP_MASKED if v4 else IP6_MASKED
    for _ in range(4):
        h = bytearray(ip)
        for off in masked_ip:
            h[off] = rng.randrange(256)
        if not v4:
            h[0] = (h[0] & 0xF0) | rng.randrange(16)
        u = bytearray(udp)
        for off in UDP_MASKED:
            u[off] = rng.randrange(256)
        f2 = bytearray(frame)
        f2[4] = rng.randrange(256)
        tried += 1
        if bad(bytes(h), bytes(u), bytes(f2)):
            errors.append("%s: changing the masked fields (TOS/TTL/checksums/BTH byte 4) changed the ICRC" % name)
    return tried


def self_test(path):
    rng = random.Random(4791)
    errors = []
    # The hardware vector.
    ip, udp, frame = CX4_CNP[14:34], CX4_CNP[34:42], CX4_CNP[42:]
    want = wire_icrc(frame)
    got = icrc(ip, udp, frame[:-ICRC_BYTES])
    if got != want:
        errors.append("ConnectX-4 Lx CNP: computed 0x%08x, the hardware sent 0x%08x" % (got, want))
    tried = segment_mutations_ok(ip, udp, frame, rng, errors, "ConnectX-4 Lx CNP")
    # The same vector through the capture reader (pcap, Ethernet).
    rec = [{"number": 1, "ts_raw": (0, 0), "linktype": LINKTYPE_ETHERNET, "data": CX4_CNP,
            "orig_len": len(CX4_CNP)}]
    n, fails, _ = check_capture(rec, out=_Null())
    if (n, fails) != (1, 0):
        errors.append("ConnectX-4 Lx CNP through check_capture: %d frames, %d failures" % (n, fails))
    summary = ["hardware vector (ConnectX-4 Lx CNP) right; %d single-bit flips and masked-field rewrites behave" % tried]

    if path:
        packets = read_capture(path)
        records = []
        n, fails, gso = check_capture(packets, out=_Null(), split_records=records)
        if fails:
            errors.append("%s: %d of %d frames wrong before any mutation (run without --self-test to see them)"
                          % (path, fails, n))
        tried = 0
        frames = [r for r in records if r[0] == "frame"]
        for k, (_kind, _ts, sip, sudp, seg) in enumerate(frames):
            tried += segment_mutations_ok(sip, sudp, seg, rng, errors, "%s frame %d" % (path, k + 1))
        summary.append("%s: %d frames, %d mutations of them behave" % (path, len(frames), tried))
        # Through the whole pipeline: one bit flipped in the last segment of
        # a GSO datagram, and one in a frame that is not one.
        victims = []
        for pkt, ip4, udp4, payload in roce_datagrams(packets):
            segs = cut(ip4, udp4, payload)
            kind = "gso" if segs and len(segs) > 1 else "single"
            if segs is None or kind in [v[0] for v in victims]:
                continue
            # The payload ends where the IP datagram does; flip a bit 7
            # bytes before that: inside the last frame, before its ICRC.
            _etype, off = network_layer(pkt["linktype"], pkt["data"])
            if (ip4[0] >> 4) == 4:
                end = off + struct.unpack("!H", ip4[2:4])[0]
            else:
                end = off + 40 + struct.unpack("!H", ip4[4:6])[0]
            victims.append((kind, pkt, end - 7))
        for kind, pkt, off in victims:
            d = bytearray(pkt["data"])
            d[off] ^= 0x04
            mutated = [dict(p) for p in packets]
            mutated[pkt["number"] - 1]["data"] = bytes(d)
            n2, fails2, _ = check_capture(mutated, out=_Null())
            if fails2 == 0:
                errors.append("%s: a bit flipped in frame %d (%s datagram, byte %d) went unnoticed"
                              % (path, pkt["number"], kind, off))
            else:
                summary.append("%s: a bit flipped in frame %d (%s datagram) is caught" % (path, pkt["number"], kind))
        if not any(v[0] == "gso" for v in victims):
            summary.append("%s: no GSO datagram to flip a bit in" % path)
    for e in errors:
        print("SELF-TEST FAILED: " + e)
    for s in summary:
        print("self-test: " + s)
    return 1 if errors else 0


class _Null:
    def write(self, _s):
        pass

    def flush(self):
        pass


# ---------------------------------------------------------------- main


def main(argv):
    ap = argparse.ArgumentParser(description="Check the ICRC of every RoCEv2 frame in a capture.")
    ap.add_argument("capture", nargs="?")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per frame")
    ap.add_argument("--split", metavar="OUT.pcap", help="write every frame as it is on a wire")
    ap.add_argument("--min-frames", type=int, default=1)
    ap.add_argument("--self-test", action="store_true", help="check the checker")
    a = ap.parse_args(argv)
    try:
        if a.self_test:
            return self_test(a.capture)
        if not a.capture:
            ap.error("a capture is needed")
        packets = read_capture(a.capture)
        records = [] if a.split else None
        frames, failures, gso = check_capture(packets, verbose=a.verbose, split_records=records)
        if a.split:
            write_pcap(a.split, records)
    except (CaptureError, OSError) as e:
        print("roce_icrc: %s" % e, file=sys.stderr)
        return 2
    print("roce_icrc: %s: %d captured packets, %d RoCEv2 frames (%d GSO datagrams cut into their segments): %s"
          % (a.capture, len(packets), frames, gso,
             "every ICRC right" if not failures else "%d WRONG or uncheckable" % failures))
    if failures:
        return 1
    if frames < a.min_frames:
        print("roce_icrc: expected at least %d RoCEv2 frames" % a.min_frames, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
