"""`make bench`: run every bench/bench_*.py and print one table of budgets, measured against alternatives."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

from bench.harness import Row


def main() -> int:
    import bench

    rows: list[Row] = []
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    only = set(sys.argv[1:])
    for name in names:
        if only and name not in only and name.removeprefix("bench_") not in only:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            rows += importlib.import_module(f"bench.{name}").run()
        except Exception:
            traceback.print_exc()
            rows.append(Row(0, f"{name} crashed", "-", ok=False))
    width = max((len(r.budget) for r in rows), default=10)
    print(f"\n{'issue':<6} {'budget':<{width}}  {'measured':<22} {'alternative (same run)':<40} ok")
    for r in sorted(rows, key=lambda r: r.issue):
        print(f"#{r.issue:<5} {r.budget:<{width}}  {r.measured:<22} {r.alternative:<40} {'yes' if r.ok else 'NO'}")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
