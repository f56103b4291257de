"""Runs acceptance cases and prints one `CASE <suite>.<name> <result>` line per case (shared by the suites here).

A case that raises prints `CASE <name> exception: ...` and the next case runs. Last comes `INFO libcuda <path>`:
the libcuda.so.1 the process really mapped, so a curelay run that silently reached the real driver is caught.
"""
import sys
import traceback


def loaded_libcuda():
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("/libcuda.so.1"):
                return line.split()[-1]
    return "<none>"


def run_cases(suite, cases, only):
    for case in cases:
        name = case.__name__[len("case_"):]
        if only and name not in only:
            continue
        try:
            print(f"CASE {suite}.{name} {case()}", flush=True)
        except Exception as e:  # a failing case must not hide the others
            print(f"CASE {suite}.{name} exception: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  flush=True)
            traceback.print_exc(file=sys.stderr)
    print(f"INFO libcuda {loaded_libcuda()}", flush=True)
