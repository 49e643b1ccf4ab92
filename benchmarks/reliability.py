"""The reliability table of docs/performance.md, measured: ingress isolation, chaos and fuzz runs, between markers.

    .venv/bin/python benchmarks/reliability.py               # full runs, prints the table
    .venv/bin/python benchmarks/reliability.py --write-docs  # ... and replaces the table in docs/performance.md

The figures are never typed by hand: this script is the only writer of the block between
`<!-- reliability-table:begin -->` and `<!-- reliability-table:end -->`.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import chaos, fuzz, ingress_isolation  # noqa: E402

PERFORMANCE_PAGE = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
BEGIN, END = "<!-- reliability-table:begin -->", "<!-- reliability-table:end -->"


def table(short: bool, requests: int) -> str:
    report = chaos.run_chaos(short)
    seen, elapsed = fuzz.run(requests)
    total = sum(seen.values())
    fivexx = sum(count for key, count in seen.items() if key.endswith("5xx"))
    rows = [(f"ingress: {name}", value) for name, value in ingress_isolation.run(ingress_isolation.parse_args([]))]
    rows += [(f"chaos: {name}", value) for name, value in report.rows()]
    rows += [
        ("fuzz: generated requests", f"{total} in {elapsed:.0f} s, every route"),
        ("fuzz: HTTP 5xx answers", f"{fivexx} (target 0)"),
        ("fuzz: schema-invalid JSON-RPC errors", "0 (target 0; the run stops at the first)"),
    ]
    lines = [
        f"Measured {date.today().isoformat()} on {platform.machine()} with `benchmarks/reliability.py`"
        f"{' --short' if short else ''} ({len(report.failures)} broken invariants):",
        "",
        "| check | result |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the CI-sized chaos run and 2 000 fuzz requests")
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/performance.md")
    args = parser.parse_args()
    text = table(args.short, 2_000 if args.short else 10_000)
    print(text)
    if args.write_docs:
        page = PERFORMANCE_PAGE.read_text()
        block = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        if not block.search(page):
            sys.exit(f"docs/performance.md has no {BEGIN} ... {END} block")
        PERFORMANCE_PAGE.write_text(block.sub(lambda _: f"{BEGIN}\n{text}\n{END}", page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
