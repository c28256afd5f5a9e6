"""Out-of-band coordination of the ranks through files (never through the backend under test).

Between two tests the ranks meet in a file barrier that also exchanges each rank's outcome:
a broken collective can then neither hang the harness nor hide which rank failed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """Writes ``data`` atomically (a reader never sees a half-written file; a kill mid-write
    leaves the previous version)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it does not exist (yet)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class FileBarrier:
    """A barrier over ``world`` ranks sharing ``directory``; each arrival carries a short note.

    Arrival n of rank r is the file ``<directory>/<r>.<n>`` holding its note (one file per step:
    a rank already past step n cannot overwrite the note another rank is still waiting to read).
    """

    def __init__(self, directory: Path, rank: int, world: int, poll_s: float = 0.02) -> None:
        self.dir, self.rank, self.world, self.poll_s = directory, rank, world, poll_s
        self.dir.mkdir(parents=True, exist_ok=True)
        self.step = 0

    def wait(self, note: str, timeout_s: float) -> list[str]:
        """Arrives with ``note`` and waits for all ranks; TimeoutError names the missing ranks."""
        self.step += 1
        write_json(self.dir / f"{self.rank}.{self.step}", note)
        deadline = time.monotonic() + timeout_s
        while True:
            notes = [read_json(self.dir / f"{r}.{self.step}") for r in range(self.world)]
            if all(n is not None for n in notes):
                return [str(n) for n in notes]
            if time.monotonic() > deadline:
                missing = [r for r, n in enumerate(notes) if n is None]
                raise TimeoutError(f"ranks {missing} did not reach step {self.step}")
            # Sleeping (not spinning) matters: ranks are oversubscribed on few cores.
            time.sleep(self.poll_s)
