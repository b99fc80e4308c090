"""Instructions per function of two gdb traces (one PC a line, in hex), B - A:
python3 sym.py ftrace-off.txt ftrace-strict.txt (see ftrace.sh)."""

import collections
import sys

from ksyms import Symbols


def count(path: str, syms: Symbols) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for line in open(path):
        try:
            c[syms.name(int(line.strip(), 16))] += 1
        except ValueError:
            continue    # gdb's own lines
    return c


def main() -> None:
    syms = Symbols()
    a, b = count(sys.argv[1], syms), count(sys.argv[2], syms)
    print("total", sum(a.values()), sum(b.values()))
    for k in sorted(set(a) | set(b), key=lambda k: -(b[k] - a[k]))[:25]:
        print(f"{b[k] - a[k]:6d} {a[k]:6d} {b[k]:6d} {k}")


if __name__ == "__main__":
    main()
