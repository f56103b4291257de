#!/usr/bin/env python3
"""Tabulates runs of curelay_driver_bench: metric | native | curelay | ratio | better.

Usage: bench_table.py <native.log> <curelay.log>
       bench_table.py --native A.log [B.log ...] --curelay X.log [Y.log ...]

With several runs per side (alternating rounds), each cell is the median of that metric over the side's runs.

Reads `METRIC <name> <value> <unit>` lines. ratio is always curelay/native. For times (unit us)
lower is better, so a ratio above 1 means curelay is slower; for rates (units ending in /s, e.g.
GB/s) higher is better, so a ratio below 1 means curelay is slower. The `better` column says which.
"""
import sys


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def read_runs(paths):
    """Median of each metric over the runs in `paths`."""
    samples = {}
    for path in paths:
        for name, (value, unit) in read_metrics(path).items():
            samples.setdefault(name, ([], unit))[0].append(value)
    return {name: (median(values), unit) for name, (values, unit) in samples.items()}


def read_metrics(path):
    metrics = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4 and parts[0] == "METRIC":
                    try:
                        metrics[parts[1]] = (float(parts[2]), parts[3])
                    except ValueError:
                        pass
    except OSError as e:
        print(f"warning: cannot read {path}: {e}", file=sys.stderr)
    return metrics


def fmt(value):
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"


def main(argv):
    if len(argv) == 3 and not argv[1].startswith("--"):
        native, curelay = read_metrics(argv[1]), read_metrics(argv[2])
    elif "--native" in argv and "--curelay" in argv:
        n_at, c_at = argv.index("--native"), argv.index("--curelay")
        native_paths = argv[n_at + 1:c_at] if n_at < c_at else argv[n_at + 1:]
        curelay_paths = argv[c_at + 1:] if c_at > n_at else argv[c_at + 1:n_at]
        native, curelay = read_runs(native_paths), read_runs(curelay_paths)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    names = list(native) + [n for n in curelay if n not in native]
    if not names:
        print("no METRIC lines in either run", file=sys.stderr)
        return 1
    rows = [("metric", "unit", "native", "curelay", "ratio c/n", "better")]
    for name in names:
        n_value, unit = native.get(name, (None, curelay.get(name, (None, "?"))[1]))
        c_value = curelay.get(name, (None, unit))[0]
        ratio = c_value / n_value if n_value and c_value is not None else None
        better = "higher" if unit.endswith("/s") else "lower"
        rows.append((name, unit, fmt(n_value), fmt(c_value), f"{ratio:.2f}x" if ratio is not None else "-", better))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
        if k == 0:
            print("-+-".join("-" * w for w in widths))
    print("ratio = curelay/native; 'better' says which direction of the metric is better "
          "(lower for times in us, higher for GB/s)")
    # Measures of one side only (ZeroMQ's own round trip, a curelay-only figure) are shown, not required.
    missing = [n for n in names if n not in native and n not in curelay]
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
