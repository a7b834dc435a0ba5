"""Run ``kvtui serve`` as a child process on a free loopback port (the embedded local target).

The dashboard and the recorder use this so the engine's steps run in their own interpreter and never
compete with the UI for the interpreter lock. ``start()`` returns once ``/health`` answers; if the
server exits or never answers, :class:`LocalServerError` carries the reason and the server's last log
lines. ``stop()`` sends SIGTERM (the server drains and exits) and kills it if it does not go.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tui.profile import Profile, ProfileError, dump_profile
from tui.serve import routes
from tui.serve.app import LISTENING_PREFIX, PARENT_PID_ENV
from tui.serve.engine_loop import describe_exit

_PORT_RE = re.compile(re.escape(LISTENING_PREFIX) + r"http://\[?[^\s\]]*\]?:(\d+)")


class LocalServerError(RuntimeError):
    """The local server could not start, or died; the message includes its last log lines."""


class LocalServer:
    """``kvtui serve`` in a child process; a context manager."""

    def __init__(
        self,
        profile: Profile,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 120.0,
        api_key_env: str | None = None,
        log_lines: int = 200,
    ) -> None:
        self.profile = profile
        self.host = host
        self.requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.api_key_env = api_key_env
        self.port: int | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._log: collections.deque[str] = collections.deque(maxlen=log_lines)
        self._port_seen = threading.Event()
        self._reader: threading.Thread | None = None
        self._tmp: str | None = None

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        if self.port is None:
            raise LocalServerError("the local server is not started")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return self.root_url + "/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> LocalServer:
        """Start the server and wait until it is healthy; raises :class:`LocalServerError`."""
        if self._proc is not None:
            return self
        self._tmp = tempfile.mkdtemp(prefix="kvtui-serve-")
        profile_path = Path(self._tmp) / "engine.toml"
        profile_path.write_text(dump_profile(self.profile, sections=("name", "engine", "defenses")), encoding="utf-8")
        cmd = [sys.executable, "-m", "tui", "serve", "--host", self.host, "--port", str(self.requested_port),
               "--profile", str(profile_path)]
        if self.api_key_env:
            cmd += ["--api-key-env", self.api_key_env]
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env[PARENT_PID_ENV] = str(os.getpid())  # the server exits if we die without stopping it
        root = str(Path(__file__).resolve().parents[2])  # so `-m tui` finds this checkout
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env, start_new_session=True,  # a Ctrl-C in the dashboard's terminal is the dashboard's to handle
        )
        self._reader = threading.Thread(target=self._read_output, name="kvtui-serve-log", daemon=True)
        self._reader.start()
        try:
            self._wait_healthy()
        except KeyboardInterrupt:
            # Ctrl-C during start-up: nothing to drain, and the engine process ignores SIGTERM while it
            # builds the model (it holds our log pipe open, so waiting for it took 5 s and more). The
            # server leads its own process group, the engine in it: end both at once.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self.stop(timeout=5.0)
            raise
        except BaseException:
            self.stop(timeout=5.0)
            raise
        return self

    def _read_output(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            line = line.rstrip("\n")
            self._log.append(line)
            if not self._port_seen.is_set():
                m = _PORT_RE.search(line)
                if m:
                    self.port = int(m.group(1))
                    self._port_seen.set()

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer yet"
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                code = self._proc.poll()
                if code is not None:
                    if self._reader is not None:
                        self._reader.join(2.0)  # collect its last words
                    if code == 2:  # it refused the profile: the same one-line profile error, our file named
                        raise ProfileError(self._refusal())
                    raise LocalServerError(
                        f"the local server exited with code {code} before it was ready"
                        + self._tail_text()
                    )
                if self._port_seen.is_set():
                    try:
                        r = client.get(self.root_url + routes.HEALTH)
                        if r.status_code == 200:
                            return
                        last_error = f"/health answered {r.status_code}"
                    except httpx.HTTPError as e:
                        last_error = f"{type(e).__name__}: {e}"
                time.sleep(0.05)
        where = self.root_url if self.port is not None else "(no port reported)"
        raise LocalServerError(
            f"the local server at {where} was not healthy after {self.startup_timeout_s:.0f} s ({last_error})"
            + self._tail_text()
        )

    def _refusal(self) -> str:
        """The server's one-line profile error, naming the user's profile instead of our temporary copy."""
        line = next((ln for ln in reversed(self._log) if ln.startswith("kvtui: ")), "kvtui: the profile was refused")
        line = line.removeprefix("kvtui: ")
        if self._tmp is not None:
            line = line.replace(str(Path(self._tmp) / "engine.toml"), self.profile.source)
        return line

    def _tail_text(self, n: int = 15) -> str:
        lines = list(self._log)[-n:]
        if not lines:
            return "; it printed nothing"
        return "; its last log lines:\n  " + "\n  ".join(lines)

    def log_tail(self, n: int = 20) -> list[str]:
        """The server's last ``n`` log lines."""
        return list(self._log)[-n:]

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def death(self) -> str | None:
        """How the server process ended ("exited with code 1", "was killed by SIGKILL"); None while alive."""
        code = self._proc.poll() if self._proc is not None else None
        return None if code is None else describe_exit(code)

    def check(self) -> None:
        """Raise :class:`LocalServerError` (with its last log lines) if the server has died."""
        if self._proc is None:
            raise LocalServerError("the local server is not started")
        code = self._proc.poll()
        if code is not None:
            raise LocalServerError(f"the local server at {self.root_url} exited with code {code}" + self._tail_text())

    def stop(self, timeout: float = 15.0, *, drain: bool = True) -> int | None:
        """Stop the server; returns its exit code.

        ``drain=True``: SIGTERM — open requests finish first. ``drain=False``: a second SIGTERM right
        after — open requests are aborted. Either way SIGKILL after ``timeout`` s.
        """
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                if not drain:
                    time.sleep(0.05)  # let the first signal land: two at once may arrive as one
                    proc.send_signal(signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
            except ProcessLookupError:
                pass
        if self._reader is not None:
            self._reader.join(2.0)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._proc = None
        return proc.returncode

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:  # a forgotten server must not outlive its owner
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
