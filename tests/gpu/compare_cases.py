#!/usr/bin/env python3
"""Compares the CASE lines of a native and a curelay run of curelay_gpu_acceptance.

Usage: compare_cases.py <native.log> <curelay.log> <frontend-dir> [native-rc curelay-rc]

Prints `PASS <case>` or `FAIL <case> native=<...> curelay=<...>` per case (native order, then cases
only the curelay run printed), `WARN ...` where the native run itself looks wrong (an error or a
mismatch there means the test, not curelay, needs a look), and last `N passed, M failed`.
Two checks are reported like cases: `process_exit` (both runs exited 0) and `libcuda_frontend` (the
curelay run really loaded <frontend-dir>/libcuda.so.1). Exit status 1 if anything failed.
"""
import os
import sys


def read_run(path):
    cases, libcuda = {}, None
    order = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("CASE "):
                    _, _, rest = line.partition(" ")
                    name, _, value = rest.partition(" ")
                    if name not in cases:
                        order.append(name)
                    cases[name] = value
                elif line.startswith("INFO libcuda "):
                    libcuda = line[len("INFO libcuda "):]
    except OSError as e:
        print(f"WARN cannot read {path}: {e}")
    return order, cases, libcuda


def main(argv):
    if len(argv) not in (4, 6):
        print(__doc__, file=sys.stderr)
        return 2
    native_path, curelay_path, frontend_dir = argv[1:4]
    native_order, native, _ = read_run(native_path)
    curelay_order, curelay, curelay_libcuda = read_run(curelay_path)

    passed = failed = 0

    def verdict(name, ok, native_value, curelay_value):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"PASS {name}")
        else:
            failed += 1
            print(f"FAIL {name} native={native_value} curelay={curelay_value}")

    if len(argv) == 6:
        verdict("process_exit", argv[4] == "0" and argv[5] == "0", argv[4], argv[5])

    loaded_dir = os.path.realpath(os.path.dirname(curelay_libcuda)) if curelay_libcuda else None
    verdict("libcuda_frontend", loaded_dir == os.path.realpath(frontend_dir), "-", curelay_libcuda or "<unknown>")

    if not native_order:
        print("WARN the native run printed no CASE lines")
    for name in native_order + [n for n in curelay_order if n not in native]:
        n_value = native.get(name, "<missing>")
        c_value = curelay.get(name, "<missing>")
        if n_value.startswith(("error:", "exception:", "mismatch")) or " mismatch" in n_value:
            print(f"WARN {name} looks wrong natively: {n_value}")
        verdict(name, name in native and name in curelay and n_value == c_value, n_value, c_value)

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
