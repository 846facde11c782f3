"""Issue 20, item 2: what proving a job's processes through its cgroup costs, against the /proc scan the
environment-marker fallback does, and what a job start pays to make and remove the cgroup."""

from __future__ import annotations

import os
import subprocess

from bench.harness import Row, median_ms, timeit

REPEAT = 200
LOOKUP_BUDGET_MS = 2.0  # a follower asks every second; cancel asks every 50 ms
START_BUDGET_MS = 5.0  # beside a job start's fork and exec of the runner (tens of ms)


def run() -> list[Row]:
    from backend.agent.host import ownership

    why = ownership._probe_cgroup()
    if why:
        return [
            Row(20, f"a job's processes via its cgroup, median ≤ {LOOKUP_BUDGET_MS:.0f} ms", "not measured: " + why)
        ]
    cgroup = None
    job = subprocess.Popen(["sleep", "60"])
    try:
        cgroup, why = ownership.cgroup_for("bench-lookup", job.pid)
        assert cgroup is not None, why
        info = {"pid": job.pid, "pgid": job.pid, "start": ownership.proc_start_time(job.pid), "cgroup": cgroup}
        assert [p for p, _ in ownership.job_processes(info)] == [job.pid]
        via_cgroup = median_ms(timeit(lambda: ownership.job_processes(info), REPEAT))
        via_proc = median_ms(timeit(lambda: ownership.job_processes(dict(info, cgroup=None)), REPEAT // 4))

        def start_and_remove() -> None:  # what a start and its runner's leave do, on the sleeper
            made, _ = ownership.cgroup_for("bench-start", job.pid)
            if made:
                _move(job.pid, os.path.dirname(made["dir"]))
                ownership.remove_cgroup(made)

        made_ms = median_ms(timeit(start_and_remove, REPEAT // 4))
    finally:
        job.kill()
        job.wait()
        ownership.remove_cgroup(cgroup or "")
    return [
        Row(
            20,
            f"a job's processes via its cgroup, median ≤ {LOOKUP_BUDGET_MS:.0f} ms",
            f"{via_cgroup:.3f} ms",
            f"/proc scan (marker fallback): {via_proc:.2f} ms ({via_proc / max(via_cgroup, 1e-6):.0f}×)",
            ok=via_cgroup <= LOOKUP_BUDGET_MS,
        ),
        Row(
            20,
            f"a job's cgroup made, entered, removed, median ≤ {START_BUDGET_MS:.0f} ms",
            f"{made_ms:.3f} ms",
            "none: the marker costs nothing here",
            ok=made_ms <= START_BUDGET_MS,
        ),
    ]


def _move(pid: int, folder: str) -> None:
    with open(os.path.join(folder, "cgroup.procs"), "w") as f:
        f.write(f"{pid}\n")
