"""The local event channel: a file that only the trainer writes progress and result lines into.

`ftbench run` used to read `FTBENCH_PROGRESS` / `FTBENCH_RESULT` lines from the trainer's stdout,
merged with its stderr. Libraries write into that stream too, and tqdm's carriage-return updates
have no newline: a progress line then arrives glued behind a half-drawn bar, and a prefix match
never sees it. So a local plan names a file of its own (`plan.output.eventsFile`): rank 0 appends
each progress line to it and the node process each result line, one complete line per `write`,
and `ftbench run` tails it. Nothing but ftbench opens that file, so no other output can land in
the middle of a line. On a cluster the plan names no such file: progress goes to
`status.progress`, results to the termination message (the same contract, another carrier), and
the stdout lines stay for people reading pod logs.

The line formats are those of ftbench.contracts.progress and ftbench.contracts.results.
Standard library only: the trainer, in any fms-hf-tuning release's environment, imports it.
"""

from __future__ import annotations

import os
from pathlib import Path


def append_line(path: str | Path, line: str) -> None:
    """Append one complete line with a single `write` on an O_APPEND descriptor.

    O_APPEND puts every write at the end of the file, so lines from the node process and rank 0
    never overwrite each other; one write per line keeps each line whole.
    """
    data = (line if line.endswith("\n") else line + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


class EventTail:
    """Reads the complete lines appended to an event file since the last call.

    A line still being written (no newline yet) stays in the file for the next call, so a reader
    polling while the trainer writes never sees half a line.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0

    def new_lines(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        return [line.decode(errors="replace") for line in chunk[:end].splitlines()]
