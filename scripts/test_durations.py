"""Write ``tests/durations.txt`` from a run's per-phase times, so that the next runs hand
the longest tests out first (tests/conftest.py).

    S3DDB_TEST_TIMES=/tmp/times.txt make test
    python scripts/test_durations.py /tmp/times.txt

Each line of the input is ``seconds phase nodeid`` (setup, call and teardown of every
test, as tests/conftest.py writes them); each line of the output is ``seconds nodeid``
for every test of at least :data:`SHORTEST` seconds (setup, call and teardown summed),
longest first. A test not listed is taken as short; a long test not yet listed (a new
one) is handed out after the listed long ones until the file is written again.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Tests shorter than this (seconds) are left out: their order hardly matters.
SHORTEST = 0.5

OUTPUT = Path(__file__).resolve().parents[1] / "tests" / "durations.txt"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    seconds: dict[str, float] = {}
    for line in Path(argv[1]).read_text(encoding="utf-8").splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        duration, _phase, nodeid = parts
        seconds[nodeid] = seconds.get(nodeid, 0.0) + float(duration)
    kept = sorted(
        ((s, n) for n, s in seconds.items() if s >= SHORTEST), key=lambda item: (-item[0], item[1])
    )
    OUTPUT.write_text("".join(f"{s:.1f} {n}\n" for s, n in kept), encoding="utf-8")
    print(f"{OUTPUT}: {len(kept)} tests of at least {SHORTEST} s, {sum(s for s, _ in kept):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
