"""Per-thread default stream forms (`<abi>_ptsz`, `<abi>_ptds`) of the driver's entry points, from cudaTypedefs.h.

Code built with `--default-stream per-thread` (or a runtime asking cuGetProcAddress with
CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) calls these forms. Each behaves as its ordinary entry point, except
that the null stream means the calling thread's default stream instead of the legacy one. curelay implements them
all the same way: a generated wrapper opens a PerThreadDefaultStream scope (frontend/client/per_thread_stream.h)
and calls the ordinary entry point through the driver table. The wrappers are weak, so a hand-written form wins.

cudaTypedefs.h declares `PFN_<api>_v<version>[_ptds|_ptsz]` with the full parameter list. A per-thread typedef at
version V belongs to the ordinary ABI variant current at V (`<api>` for the first version, `<api>_v<k+1>` for the
k-th later one) plus its suffix; only names the real driver exports are generated.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

_TYPEDEF_RE = re.compile(
    r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu[A-Za-z0-9]+?)_v(\d+)(_ptds|_ptsz)?\s*\)\s*\(([^;]*)\)\s*;")
_NAME_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(\[\s*\])?\s*$")


@dataclass(frozen=True)
class PerThreadForm:
    name: str        # e.g. cuMemcpyHtoD_v2_ptds
    base: str        # the ordinary entry point, e.g. cuMemcpyHtoD_v2
    params: str      # parameter list as cudaTypedefs.h writes it
    arguments: str   # the parameter names, comma-separated


def _argument_names(params: str, where: str) -> str:
    params = " ".join(params.split())
    if params in ("", "void"):
        return ""
    names = []
    for param in params.split(","):
        match = _NAME_RE.search(param.strip())
        if match is None or len(param.split()) < 2:
            raise SystemExit(f"gen_per_thread_forms: {where}: cannot name parameter {param!r}")
        names.append(match.group(1))
    return ", ".join(names)


def per_thread_forms(typedefs_text: str, exports: set[str]) -> dict[str, PerThreadForm]:
    ordinary: dict[str, list[int]] = defaultdict(list)
    per_thread: list[tuple[str, int, str, str]] = []
    for api, version, suffix, params in _TYPEDEF_RE.findall(typedefs_text):
        if suffix:
            per_thread.append((api, int(version), suffix, params))
        else:
            ordinary[api].append(int(version))
    forms: dict[str, PerThreadForm] = {}
    for api, version, suffix, params in per_thread:
        versions = sorted(ordinary.get(api, []))
        current = sum(1 for v in versions if v <= version) - 1
        base = api if current <= 0 else f"{api}_v{current + 1}"
        name = base + suffix
        if name not in exports or base not in exports or name in forms:
            continue
        forms[name] = PerThreadForm(name, base, " ".join(params.split()),
                                    _argument_names(params, f"PFN_{api}_v{version}{suffix}"))
    if len(forms) < 60:
        raise SystemExit(f"gen_per_thread_forms: only {len(forms)} per-thread forms found; format changed?")
    return forms


def emit_per_thread_forms(forms: dict[str, PerThreadForm], banner: str) -> str:
    out = [banner, """\
//
// Per-thread default stream forms: each runs its ordinary entry point with the null stream meaning the calling
// thread's default stream (frontend/codegen/gen_per_thread_forms.py). Weak: a hand-written form wins.

#include <cuda.h>

#include "frontend/client/per_thread_stream.h"
#include "driver_table.h"

#define CURELAY_PER_THREAD_FORM(name, base, params, arguments)                                  \\
  extern "C" __attribute__((weak, visibility("default"))) CUresult name params;                 \\
  extern "C" CUresult name params {                                                             \\
    static const auto ordinary =                                                                \\
        reinterpret_cast<decltype(&name)>(::curelay::frontend::FindDriverSymbol(#base));        \\
    ::curelay::frontend::PerThreadDefaultStream scope;                                          \\
    return ordinary arguments;                                                                  \\
  }

"""]
    for form in sorted(forms.values(), key=lambda f: f.name):
        out.append(f"CURELAY_PER_THREAD_FORM({form.name}, {form.base}, ({form.params}), ({form.arguments}))\n")
    out.append("\n#undef CURELAY_PER_THREAD_FORM\n")
    return "".join(out)
