"""One way to start a kvtui child process and talk to it: ``python -m MODULE --fd N`` with one end of
a socket pair, pickled messages over a :class:`multiprocessing.connection.Connection`.

Used by the engine process of ``kvtui serve`` (:mod:`tui.serve.engine_loop`) and by the load workers
(:mod:`tui.load.workers`), so both find this checkout, close their copy of the child's end, and read
their ``--fd`` the same way.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path


def spawn_child(module: str, *, buffer_bytes: int | None = None) -> tuple[subprocess.Popen, Connection]:
    """Start ``python -m module --fd N``; returns the process and the parent's end of the socket.

    ``buffer_bytes``: both ends' socket buffers, for a pipe neither side should ever block on."""
    ours, theirs = socket.socketpair()
    if buffer_bytes is not None:
        for sock in (ours, theirs):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # so `-m tui....` finds this checkout
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    fd = theirs.fileno()
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, "--fd", str(fd)],
                                pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, Connection(ours.detach())


def child_connection(argv: list[str] | None, description: str) -> Connection:
    """In the child: its end of the socket, from ``--fd`` on its command line."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--fd", type=int, required=True, help="file descriptor of the socket to the parent")
    return Connection(p.parse_args(argv).fd)
