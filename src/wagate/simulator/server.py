"""Run any ASGI app under uvicorn in the background: in a thread (tests) or a task (``serve --sandbox``).

The listening socket is bound before uvicorn starts, so port 0 yields a known free port without
parsing logs, and a restarted server can bind the same port again (SO_REUSEADDR). uvicorn is told not
to touch logging configuration, so the host application's logging stays as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

_DEFAULTS: dict[str, Any] = {
    "log_config": None,
    "log_level": "warning",
    "access_log": False,
    # "on", not "auto": a startup failure must stop the server rather than be logged and ignored.
    "lifespan": "on",
    # Idle keep-alive connections outlive the clients' pool timeouts, so a client never writes a
    # request into a connection the server is closing (that would look like an unconfirmed send).
    "timeout_keep_alive": 30,
    # In-flight requests (e.g. the simulator's slow replies) are cancelled after this on stop.
    "timeout_graceful_shutdown": 2,
}


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class BackgroundServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the host process.

    Stock uvicorn installs SIGINT/SIGTERM handlers when served from the main thread; a background
    server would then swallow the host's Ctrl+C. The host stops it with ``should_exit`` instead.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_server(
    app: Any, host: str, port: int, **uvicorn_options: Any
) -> tuple[uvicorn.Server, socket.socket]:
    sock = bind_socket(host, port)
    bound_port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, host=host, port=bound_port, **{**_DEFAULTS, **uvicorn_options})
    return BackgroundServer(config), sock


async def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
    try:
        await server.serve(sockets=[sock])
    except SystemExit as exc:
        # uvicorn exits the process when lifespan startup fails; inside a shared loop that would
        # tear the host down, so report it as an ordinary error instead.
        raise RuntimeError(f"server failed to start (exit code {exc.code})") from None
    finally:
        sock.close()


class RunningServer:
    """A uvicorn server on its own thread and event loop; use as a context manager or call stop()."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, **uvicorn_options: Any) -> None:
        self.server, self._sock = make_server(app, host, port, **uvicorn_options)
        self.host = host
        self.port = self.server.config.port
        self.base_url = _url(host, self.port)
        self._thread = threading.Thread(target=self._run, name=f"uvicorn-{self.port}", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self._sock])
        except BaseException as exc:  # SystemExit on lifespan failure included: report it to start()
            self._error = exc

    def start(self, timeout: float = 10.0) -> RunningServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                self._sock.close()
                raise RuntimeError(f"server on {self.base_url} failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server on {self.base_url} did not start within {timeout} s")
            time.sleep(0.005)
        return self

    def request_stop(self) -> None:
        """Ask the server to shut down without waiting (stop several servers in parallel, then stop())."""
        self.server.should_exit = True

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful shutdown (lifespan shutdown runs); forced if it takes longer than ``timeout``."""
        if not self._thread.is_alive():
            self._sock.close()
            return
        self.request_stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.server.force_exit = True
            self._thread.join(5.0)
        self._sock.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self.server.started

    def __enter__(self) -> RunningServer:
        if not self._thread.is_alive() and not self.server.started:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def run_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, **uvicorn_options: Any) -> RunningServer:
    """Start ``app`` and return once it accepts connections."""
    return RunningServer(app, host, port, **uvicorn_options).start()


def start_in_thread(
    app: Any, host: str = "127.0.0.1", port: int = 0, **uvicorn_options: Any
) -> tuple[str, Callable[[], None]]:
    """``(base_url, stop)`` for ``app`` served on a background thread; port 0 picks a free port."""
    running = run_in_thread(app, host, port, **uvicorn_options)
    return running.base_url, running.stop


async def serve_in_background(
    app: Any, host: str = "127.0.0.1", port: int = 0, *, startup_timeout: float = 10.0, **uvicorn_options: Any
) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Serve ``app`` as a task of the running loop; returns once it is started.

    The bound port is ``server.config.port``. Stop with ``server.should_exit = True`` and
    ``await task``.
    """
    server, sock = make_server(app, host, port, **uvicorn_options)
    task = asyncio.get_running_loop().create_task(_serve(server, sock))
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if task.done():
            sock.close()
            exc = task.exception() if not task.cancelled() else None
            raise RuntimeError(f"server on {_url(host, server.config.port)} failed to start: {exc!r}")
        if time.monotonic() > deadline:
            server.should_exit = True
            await asyncio.wait({task}, timeout=5.0)
            sock.close()
            raise RuntimeError(f"server did not start within {startup_timeout} s")
        await asyncio.sleep(0.005)
    return server, task


def base_url_of(server: uvicorn.Server) -> str:
    return _url(server.config.host, server.config.port)
