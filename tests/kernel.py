"""A real Jupyter kernel (jupyter_client + ipykernel) for tests of what a notebook user sees."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from jupyter_client.manager import start_new_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class CellResult:
    """What one executed cell showed: streams, rich outputs and the error, if any."""

    stdout: str = ""
    stderr: str = ""
    result: Optional[str] = None
    error: Optional[Dict[str, Any]] = None
    messages: List[Dict[str, Any]] = field(default_factory=list)

    def raise_for_error(self) -> "CellResult":
        if self.error is not None:
            raise AssertionError("cell failed:\n" + "\n".join(self.error["traceback"]))
        return self


class Kernel:
    """Start an ipykernel, run cells in it, shut it down."""

    def __init__(self) -> None:
        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid  # type: ignore[union-attr]

    def run(self, code: str, timeout: float = 60) -> CellResult:
        cell = CellResult()

        def collect(msg: Dict[str, Any]) -> None:
            cell.messages.append(msg)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    cell.stdout += content["text"]
                else:
                    cell.stderr += content["text"]
            elif kind == "execute_result":
                cell.result = content["data"].get("text/plain")
            elif kind == "error":
                cell.error = content

        self.client.execute_interactive(code, timeout=timeout, output_hook=collect, allow_stdin=False)
        return cell

    def shutdown(self) -> None:
        """As a notebook's Shut Down: asked to exit, then SIGTERM to its process group, then SIGKILL,
        0.5 s apart. Not SIGKILL at once: that kills the resource tracker, which a SIGTERM spares to
        remove the semaphores a spawn context made (a kernel that used one takes seconds to exit)."""
        self.client.stop_channels()
        self.manager.shutdown_wait_time = 1.0
        self.manager.shutdown_kernel(now=False)
