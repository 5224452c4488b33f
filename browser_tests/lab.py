"""A JupyterLab server of the test's own: started from this virtualenv on 127.0.0.1 with
a known token, its settings, workspaces and runtime files in a temp folder (nothing of
the user's Jupyter set-up leaks in, nothing of the test's leaks out), stopped through
its REST API so that it shuts its kernels down itself."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, List, Optional

import psutil

START_TIMEOUT = 60  # seconds for the server to answer; a cold start takes ~10 s on 2 cores
STOP_TIMEOUT = 20

# JupyterLab user settings: no news or update checks (the network is closed; their
# notification would also sit on the screenshot), and every cell kept in the DOM (the
# default windowing may detach cells scrolled out of view).
SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


class LabServer:
    """``jupyter lab`` serving ``root_dir``; ``url(path)`` gives a page's address."""

    def __init__(self, root_dir: Path, home: Path) -> None:
        self.root_dir, self.home = root_dir, home
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "server.log"
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> None:
        _write_settings(self.home / "settings")
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
                   "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                   f"--ServerApp.root_dir={self.root_dir}", f"--LabApp.user_settings_dir={self.home / 'settings'}",
                   f"--LabApp.workspaces_dir={self.home / 'workspaces'}", "--LabApp.expose_app_in_browser=True"]
        if os.geteuid() == 0:
            command.append("--allow-root")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self._environment(), cwd=self.root_dir)
        self._wait_until_it_answers()

    def _environment(self) -> dict:
        env = dict(os.environ)
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
            env[name] = str(self.home / name.lower())
        env.pop("NBMP_DASHBOARD", None)  # the notebook's own dashboard= choice is what is tested
        return env

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with code {self.process.returncode} before answering; "
                                   f"its log:\n{self.log()}")
            try:
                self.api("GET", "/api/status")
                return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"jupyter lab did not answer on {self.base} within {START_TIMEOUT} s; "
                                       f"its log:\n{self.log()}") from None
                time.sleep(0.25)

    def url(self, path: str) -> str:
        return f"{self.base}/{path.lstrip('/')}?token={self.token}"

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(self.base + path, method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_states(self) -> list:
        """The execution state ("idle", "busy", "starting") of every running kernel."""
        return [kernel["execution_state"] for kernel in self.api("GET", "/api/kernels")]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> List[str]:
        """Shut the kernels down, then the server (killed if it does not go in time).
        Returns the processes of its tree that outlived it (now killed): a kernel or a
        worker that a dead server no longer parents would escape a check of our children."""
        if self.process is None or self.process.poll() is not None:
            return []
        tree = psutil.Process(self.process.pid).children(recursive=True)
        try:
            for kernel in self.api("GET", "/api/kernels"):
                self.api("DELETE", f"/api/kernels/{kernel['id']}")
            self.api("POST", "/api/shutdown")
            self.process.wait(STOP_TIMEOUT)
        except (OSError, urllib.error.URLError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(STOP_TIMEOUT)
        return _kill_survivors(tree)


def _kill_survivors(processes: List[psutil.Process]) -> List[str]:
    _, alive = psutil.wait_procs(processes, timeout=STOP_TIMEOUT)
    survivors = []
    for process in alive:
        try:
            survivors.append(f"{process.pid} {' '.join(process.cmdline())}")
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return survivors


def _write_settings(folder: Path) -> None:
    for plugin, values in SETTINGS.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
