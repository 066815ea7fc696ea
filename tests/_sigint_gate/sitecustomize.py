"""Start-up gate for tests/test_cli.py's Ctrl-C test (on PYTHONPATH only there).

When ``HIERDP_TEST_GATE_FD`` names a pipe, the first import of ``hierdp._version`` (the
one right after ``hierdp`` installs its SIGINT handler) writes ``hierdp-gate`` on stderr
and waits until the test writes one byte to that pipe. The test can then send SIGINT at
a known moment of start-up instead of guessing from how far its reader of stderr got
(a fast start-up could finish the whole release before the reader saw the import).
"""
import os
import sys

_FD = os.environ.pop("HIERDP_TEST_GATE_FD", None)


class _Gate:
    """A meta-path finder that finds nothing: it only waits at ``hierdp._version``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def find_spec(self, name, path=None, target=None):
        if name == "hierdp._version" and self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.write(2, b"hierdp-gate\n")
            os.read(fd, 1)  # a SIGINT while waiting runs hierdp's handler here
            os.close(fd)
        return None


if _FD is not None:
    sys.meta_path.insert(0, _Gate(int(_FD)))
