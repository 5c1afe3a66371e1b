#!/usr/bin/env python3
"""The service manager's end of sd_notify(3), for tests: binds an AF_UNIX
datagram socket at PATH (what $NOTIFY_SOCKET names) and appends each
notification to LOG as one line, "pid=<sender> <VAR=VALUE ...>" (the
sender's PID from its credentials, as systemd's NotifyAccess= checks it;
the message's newlines as spaces), flushed at once. Runs until killed.

    notify_socket.py PATH LOG
"""
import os
import socket
import struct
import sys

path, log = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
sock.bind(path)
with open(log, "a", encoding="utf-8") as out:
    out.write("listening\n")
    out.flush()
    creds_size = struct.calcsize("3i")
    while True:
        data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
        pid = "?"
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = str(struct.unpack("3i", payload[:creds_size])[0])
        text = data.decode("utf-8", "replace").strip().replace("\n", " ")
        out.write(f"pid={pid} {text}\n")
        out.flush()
