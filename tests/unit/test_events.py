"""The local event file: whole lines only, in order, however the writes and reads interleave."""

from __future__ import annotations

from pathlib import Path

from ftbench.contracts.events import EventTail, append_line


def test_a_reader_sees_complete_lines_once_and_never_half_a_line(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    tail = EventTail(path)
    assert tail.new_lines() == []  # the trainer has not written yet
    append_line(path, "FTBENCH_PROGRESS {}")
    append_line(path, "FTBENCH_RESULT {}\n")
    assert tail.new_lines() == ["FTBENCH_PROGRESS {}", "FTBENCH_RESULT {}"]
    with path.open("a") as f:  # a line caught mid-write stays for the next read
        f.write('FTBENCH_PROGRESS {"st')
    assert tail.new_lines() == []
    with path.open("a") as f:
        f.write('ep":2}\n')
    assert tail.new_lines() == ['FTBENCH_PROGRESS {"step":2}']
    assert tail.new_lines() == []
