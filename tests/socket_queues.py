"""What a process's TCP sockets hold unread, seen from outside the process (Linux ``/proc``).

A fixture seam for tests that stop a process (SIGSTOP) and must know what reached it since: the
kernel keeps receiving for a stopped process, so a broker's answer to a request the process sent
before it stopped sits in that socket's receive queue (``rx_queue`` in ``/proc/<pid>/net/tcp``
and ``tcp6``) until the process runs again. The process's sockets are its ``/proc/<pid>/fd``
entries ``socket:[inode]``; the rows of the network tables are matched to them by inode.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

_ESTABLISHED = "01"


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in os.listdir(fds):
        try:
            target = os.readlink(fds / fd)
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def unread_bytes(pid: int, peer_ports: Collection[int]) -> dict[str, int]:
    """Per established TCP socket of ``pid`` whose peer listens on one of ``peer_ports`` (socket
    inode → bytes): what the kernel received on it and the process has not read yet."""
    inodes = _socket_inodes(pid)
    queued: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
            # inode ...
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            inode = cols[9]
            if cols[3] == _ESTABLISHED and inode in inodes and remote_port in peer_ports:
                queued[inode] = int(cols[4].split(":")[1], 16)
    return queued
