"""Run one mm selftest program N times in one boot per mode, through the
harness's own selftests stages (build, archive, run_mode, parse), and print
each run's outcome. Used on 2026-11-24 for deferred's one uffd-stress:shmem
failure at 58 patches:

    PYTHONPATH=. .venv/bin/python docs/results/2026-11-24-uffd-stress-shmem-flake/repeat-selftest.py uffd-stress:shmem 10 1 deferred off
    PYTHONPATH=. .venv/bin/python docs/results/2026-11-24-uffd-stress-shmem-flake/repeat-selftest.py uffd-stress:shmem 20 2 deferred off

(program id, runs per boot, vCPUs, modes).

Logs land in out/logs as for ./xpfo selftests.
"""
import dataclasses
import sys

from harness import selftests


def main() -> int:
    pid, n, cpus, modes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    prog = next(p for p in selftests.PROGRAMS if p.id == pid)
    req = selftests.build_request()
    built = selftests.build(req)
    if prog.binary not in built.built:
        print(f"error: {prog.binary} did not build", file=sys.stderr)
        return 1
    progs = [dataclasses.replace(prog, id=f"{pid}#{i}") for i in range(n)]
    initrd = selftests.archive(req, progs)
    for mode in modes:
        run = selftests.run_mode(mode, progs, initrd, None, cpus=cpus)
        res = run["programs"]
        bad = [k for k, r in res.items() if r["status"] != "pass"]
        print(f"{mode}, {cpus} vCPUs: {n - len(bad)}/{n} pass; not pass: "
              + ", ".join(f"{k}={res[k]['status']}" for k in bad)
              + f"; logs {' '.join(run['logs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
