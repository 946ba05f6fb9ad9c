"""Start a CLI as a terminal's foreground job would run it, for the Ctrl-C tests.

A shell starts background jobs with SIGINT ignored, and Python then keeps it ignored (no
KeyboardInterrupt), so a test suite launched in the background would see `ftbench run` ignore the
test's SIGINT. The child restores the default disposition before it execs, as a terminal's job has.
"""

from __future__ import annotations

import signal


def foreground() -> None:
    """`preexec_fn`: SIGINT back to its default, so Python installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
