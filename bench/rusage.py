"""`python -m bench.rusage OUT -- CMD ...`: run CMD as a child of this small process and write its wall
seconds, CPU seconds and peak resident memory (wait4's ru_maxrss) to OUT as JSON; exit with its code.

Measured from a small parent on purpose: Linux carries a process's high-water mark across fork and exec,
so a child started by a large process (the benchmark, after it wrote a big table) would report at least
that process's peak. This one imports nothing beyond the interpreter's start.
"""

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    start = time.perf_counter()
    pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with open(out, "w") as fh:
        json.dump({"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
                   "peak_rss_bytes": usage.ru_maxrss * 1024, "exit_code": code}, fh)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
