#!/usr/bin/env python3
"""Generate curelay's libcuda.so.1 entry-point scaffolding.

Pure Python 3 standard library; run at build time by entry_points.cmake.

Subcommands
-----------
generate       Write the generated sources into --out-dir:
                 driver_stubs.cc  weak `extern "C"` stub for every exported name
                 driver_table.h   curelay::frontend lookup API (+ kDriverSymbolCount)
                 driver_table.cc  sorted {name, fn} table, API->ABI alias table,
                                  FindDriverSymbol / ResolveProcAddress
                 libcuda.map      anonymous GNU ld version script (exactly the exports)
report         Print how the export list and the header macros relate (no files).
check-exports  Compare a built library's dynamic symbols (via nm) with the export
               list; exit 1 on any difference.  Also prints implemented/stub counts
               (weak = still the generated stub).

Inputs: cuda.h (its API->ABI renaming macros), optional extra driver headers
(cudaGL.h, cudaVDPAU.h, ...; same macro forms), and driver_exports.txt (the
real driver's exported names, one per line).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_per_thread_forms import emit_per_thread_forms, per_thread_forms  # noqa: E402

GENERATOR = "frontend/codegen/gen_entry_points.py"

# --------------------------------------------------------------------------
# Export list
# --------------------------------------------------------------------------

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_exports(path: Path) -> list[str]:
    """Return the exported names, validated and sorted by byte order."""
    names: list[str] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        name = raw.strip()
        if not name or name.startswith("#"):
            continue
        if not _IDENT_RE.match(name):
            raise SystemExit(f"{path}:{lineno}: not a C identifier: {name!r}")
        if name in seen:
            raise SystemExit(f"{path}:{lineno}: duplicate export {name!r}")
        seen.add(name)
        names.append(name)
    if not names:
        raise SystemExit(f"{path}: no exported names")
    # Python str ordering on ASCII == std::string_view / memcmp ordering, which
    # is what the C++ binary search relies on.
    return sorted(names)


# Exported names that are DATA objects in the real driver, not functions: the
# cuda-gdb debug-API globals.  cudadebugger.h (cuda-gdb) documents them as
# "Name of the global variable ..." which the debugger reads/writes through
# ptrace; sizes as observed in libcuda.so (.bss/.data).  They get weak,
# zero-initialised objects of that size instead of function stubs, so a
# debugger poking them never scribbles over code.  Names listed here but not
# exported are ignored.
DATA_SYMBOLS: dict[str, int] = {
    "cudbgApiClientPid": 4,
    "cudbgApiClientRevision": 4,
    "cudbgAttachHandlerAvailable": 4,
    "cudbgDebuggerCapabilities": 4,
    "cudbgDebuggerInitialized": 4,
    "cudbgDetachSuspendedDevicesMask": 4,
    "cudbgEnableIntegratedMemcheck": 4,
    "cudbgEnableLaunchBlocking": 4,
    "cudbgEnablePreemptionDebugging": 4,
    "cudbgInjectionPath": 0x1000,
    "cudbgIpcFlag": 4,
    "cudbgReportDriverApiErrorFlags": 4,
    "cudbgReportedDriverApiErrorCode": 8,
    "cudbgReportedDriverApiErrorFuncNameAddr": 8,
    "cudbgReportedDriverApiErrorFuncNameSize": 8,
    "cudbgReportedDriverApiErrorNameAddr": 8,
    "cudbgReportedDriverApiErrorNameSize": 8,
    "cudbgReportedDriverApiErrorSource": 8,
    "cudbgReportedDriverApiErrorStringAddr": 8,
    "cudbgReportedDriverApiErrorStringSize": 8,
    "cudbgReportedDriverInternalErrorCode": 8,
    "cudbgResumeForAttachDetach": 4,
    "cudbgRpcEnabled": 4,
    "cudbgSessionId": 4,
    "cudbgUseExternalDebugger": 4,
}

# --------------------------------------------------------------------------
# Header parsing (just enough of the preprocessor for cuda.h's macro block)
# --------------------------------------------------------------------------

PT_MACROS = {"__CUDA_API_PTDS": "_ptds", "__CUDA_API_PTSZ": "_ptsz"}
PT_GUARD = "__CUDA_API_PER_THREAD_DEFAULT_STREAM"

_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DIRECTIVE_RE = re.compile(r"^\s*#\s*(\w+)\s*(.*?)\s*$")
_DEFINE_RE = re.compile(r"^(cu[A-Za-z0-9_]*)\s+(.+)$")
_PT_CALL_RE = re.compile(r"^(__CUDA_API_PT(?:DS|SZ))\s*\(\s*([A-Za-z_]\w*)\s*\)$")
_PT_IMPL_RE = {
    "__CUDA_API_PTDS": re.compile(r"#\s*define\s+__CUDA_API_PTDS\s*\(\s*api\s*\)\s+api\s*##\s*_ptds\b"),
    "__CUDA_API_PTSZ": re.compile(r"#\s*define\s+__CUDA_API_PTSZ\s*\(\s*api\s*\)\s+api\s*##\s*_ptsz\b"),
}
_DECL_RE = re.compile(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(")
_CUDA_VERSION_RE = re.compile(r"^\s*#\s*define\s+CUDA_VERSION\s+(\d+)", re.M)


@dataclass
class Macro:
    name: str
    rhs: str          # identifier, or __CUDA_API_PTxx(arg) normalised
    per_thread_only: bool
    where: str


@dataclass
class HeaderInfo:
    # Macros active in the default (legacy stream) compilation mode.
    legacy: dict[str, Macro] = field(default_factory=dict)
    # Macros only active when CUDA_API_PER_THREAD_DEFAULT_STREAM is defined.
    per_thread: dict[str, Macro] = field(default_factory=dict)
    # cu* macros ignored because of their #if context (e.g. __CUDA_API_VERSION_INTERNAL).
    skipped: list[tuple[Macro, str]] = field(default_factory=list)
    # Function names appearing in `CUresult CUDAAPI name(` declarations (raw tokens).
    declared: set[str] = field(default_factory=set)
    cuda_version: str | None = None


def _logical_lines(text: str) -> list[str]:
    text = _COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return text.replace("\\\n", " ").splitlines()


def _frame_kind(directive: str, arg: str) -> str:
    """Classify an #if-frame: 'guard' (include guard / harmless), 'pt', or 'other'."""
    if directive == "ifndef":
        return "guard"          # include guards (__cuda_cuda_h__, CUDAGL_H, ...)
    norm = re.sub(r"\s+", "", arg)
    if (directive == "ifdef" and norm == PT_GUARD) or norm in (f"defined({PT_GUARD})", f"defined{PT_GUARD}"):
        return "pt"
    return "other"


def parse_header(path: Path, info: HeaderInfo, *, require_pt_macros: bool) -> None:
    raw = path.read_text(encoding="utf-8", errors="replace")
    if require_pt_macros:
        for macro, rx in _PT_IMPL_RE.items():
            if not rx.search(raw):
                raise SystemExit(
                    f"{path}: could not find '#define {macro}(api) api ## {PT_MACROS[macro]}'; "
                    "the per-thread naming scheme changed - update gen_entry_points.py")
        m = _CUDA_VERSION_RE.search(raw)
        info.cuda_version = m.group(1) if m else None
    for m in _DECL_RE.finditer(_COMMENT_RE.sub(" ", raw)):
        info.declared.add(m.group(1))

    # Stack of (kind, in_else_branch, text).
    stack: list[tuple[str, bool, str]] = []
    for lineno, line in enumerate(_logical_lines(raw), 1):
        d = _DIRECTIVE_RE.match(line)
        if not d:
            continue
        directive, arg = d.group(1), d.group(2)
        if directive in ("if", "ifdef", "ifndef"):
            stack.append((_frame_kind(directive, arg), False, f"#{directive} {arg}"))
        elif directive in ("elif", "else"):
            if not stack:
                raise SystemExit(f"{path}:{lineno}: #{directive} without #if")
            _, _, text = stack[-1]
            stack[-1] = ("other", True, f"{text} ... #{directive} {arg}".rstrip())
        elif directive == "endif":
            if not stack:
                raise SystemExit(f"{path}:{lineno}: #endif without #if")
            stack.pop()
        elif directive in ("define", "undef"):
            dm = _DEFINE_RE.match(arg) if directive == "define" else None
            name = dm.group(1) if dm else arg.split()[0] if arg else ""
            if not re.match(r"^cu[A-Z]", name):
                continue
            kinds = [k for k, _, _ in stack]
            blocked = [t for k, _, t in stack if k == "other"]
            pt_only = "pt" in kinds
            where = f"{path.name}:{lineno}"
            if directive == "undef":
                if not blocked:
                    (info.per_thread if pt_only else info.legacy).pop(name, None)
                continue
            if dm is None:
                continue
            rhs = re.sub(r"\s+", " ", dm.group(2).strip())
            pc = _PT_CALL_RE.match(rhs)
            if pc:
                rhs = f"{pc.group(1)}({pc.group(2)})"
            elif not _IDENT_RE.match(rhs):
                print(f"gen_entry_points: warning: {where}: ignoring unrecognised macro "
                      f"'{name} {rhs}'", file=sys.stderr)
                continue
            macro = Macro(name, rhs, pt_only, where)
            if blocked:
                info.skipped.append((macro, blocked[-1]))
            elif pt_only:
                info.per_thread[name] = macro
            else:
                info.legacy[name] = macro
    if stack:
        raise SystemExit(f"{path}: unbalanced #if/#endif")


def expand(name: str, macros: dict[str, Macro], per_thread: bool,
           active: frozenset[str] = frozenset()) -> str:
    """Expand an identifier the way the C preprocessor would (object-like
    macros plus __CUDA_API_PTDS/PTSZ; a macro is not re-expanded inside itself)."""
    m = macros.get(name)
    if m is None or name in active:
        return name
    active = active | {name}
    pc = _PT_CALL_RE.match(m.rhs)
    if not pc:
        return expand(m.rhs, macros, per_thread, active)
    macro, arg = pc.group(1), pc.group(2)
    if per_thread:
        # `api ## _ptds`: operand of ## is not pre-expanded; result is rescanned.
        return expand(arg + PT_MACROS[macro], macros, per_thread, active)
    # `api`: argument is fully expanded, then rescanned.
    return expand(expand(arg, macros, per_thread, active), macros, per_thread, active)


@dataclass
class Alias:
    api: str
    abi: str
    per_thread_abi: str | None
    where: str


def build_aliases(info: HeaderInfo, exports: set[str]) -> tuple[list[Alias], list[str]]:
    """API name -> (default ABI, per-thread ABI) for every renaming macro."""
    legacy_env = dict(info.legacy)
    pt_env = {**info.legacy, **info.per_thread}
    aliases: list[Alias] = []
    problems: list[str] = []
    for api in sorted(set(legacy_env) | set(pt_env)):
        abi = expand(api, legacy_env, per_thread=False)
        pt = expand(api, pt_env, per_thread=True)
        where = (pt_env.get(api) or legacy_env[api]).where
        if abi == api and pt == abi:
            continue
        if abi not in exports:
            problems.append(f"{where}: {api} -> {abi}: default ABI name not exported "
                            "(entry kept; resolves to nullptr)")
        per_thread_abi: str | None = pt if pt != abi else None
        if per_thread_abi is not None and per_thread_abi not in exports:
            problems.append(f"{where}: {api} -> {per_thread_abi}: per-thread ABI name not "
                            "exported (dropped; falls back to default)")
            per_thread_abi = None
        aliases.append(Alias(api, abi, per_thread_abi, where))
    return aliases, problems


def load_headers(cuda_h: Path, extra: list[Path]) -> HeaderInfo:
    info = HeaderInfo()
    parse_header(cuda_h, info, require_pt_macros=True)
    for h in extra:
        parse_header(h, info, require_pt_macros=False)
    return info


# --------------------------------------------------------------------------
# Emitters
# --------------------------------------------------------------------------

def _banner(info: HeaderInfo, inputs: list[Path]) -> str:
    srcs = ", ".join(p.name for p in inputs)
    ver = f" (CUDA_VERSION {info.cuda_version})" if info.cuda_version else ""
    return (f"// Generated by {GENERATOR} from {srcs}{ver}.\n"
            "// DO NOT EDIT: edit the generator or its inputs instead.\n")


def _cstr(s: str | None) -> str:
    return "nullptr" if s is None else f'"{s}"'


def emit_stubs(names: list[str], banner: str, skip: set[str] = frozenset()) -> str:
    out = [banner, """\
//
// One WEAK definition per symbol exported by the real libcuda.so.1.  The
// hand-written frontend/api/*.cc files define implemented entry points with
// their exact cuda.h prototypes as ordinary (strong) symbols; the static linker
// then picks the strong definition and drops the stub.  Only the symbol name
// matters to the linker (everything is extern "C"), so the stubs use a uniform
// `int (void)` signature: on x86-64/aarch64 the caller owns argument registers
// and stack, and CUresult is an int-sized enum returned in the integer return
// register, so a stub may be called with any argument list.
//
// cuda.h is intentionally NOT included here: its macros
// (`#define cuMemAlloc cuMemAlloc_v2`, __CUDA_API_PTDS(...)) would rename the
// stubs, and its real prototypes would conflict with the uniform signature.
//
// Caveats for hand-written definitions:
//  * they must have default visibility (the library is built with
//    -fvisibility=hidden); a hidden strong definition makes the merged symbol
//    hidden and it silently disappears from the exports;
//  * they must be linked as object files (sources/OBJECT library), not from a
//    static archive: the weak stub already satisfies every reference, so the
//    linker would never pull the archive member in.

#include <cstddef>

#include "api/not_supported.h"

#define CURELAY_DRIVER_STUB(index, name)                                      \\
  extern "C" __attribute__((weak, visibility("default"))) int name(void);     \\
  extern "C" int name(void) {                                                 \\
    return ::curelay::frontend::ReportNotSupported(index);                    \\
  }

// Debugger-interface globals (data objects in the real driver).
#define CURELAY_DRIVER_DATA(name, size)                                       \\
  extern "C" unsigned char name[size];                                        \\
  extern "C" {                                                                \\
  __attribute__((weak, visibility("default"), aligned(8)))                    \\
  unsigned char name[size] = {};                                              \\
  }

"""]
    for i, n in enumerate(names):
        if n in skip:
            continue  # generated per-thread form (per_thread_forms.cc)
        if n in DATA_SYMBOLS:
            out.append(f"CURELAY_DRIVER_DATA({n}, {DATA_SYMBOLS[n]})\n")
        else:
            out.append(f"CURELAY_DRIVER_STUB({i}, {n})\n")
    out.append("\n#undef CURELAY_DRIVER_DATA\n#undef CURELAY_DRIVER_STUB\n")
    return "".join(out)


def emit_table_h(names: list[str], banner: str) -> str:
    return banner + f"""\
//
// Lookup over every symbol exported by curelay's libcuda.so.1.

#pragma once

#include <cstddef>
#include <string_view>

namespace curelay::frontend {{

// Number of exported driver symbols (entries in driver_exports.txt).
inline constexpr std::size_t kDriverSymbolCount = {len(names)};

// The table is sorted by name; indices are stable for one generated build and
// are what the weak stubs pass to ReportNotSupported().
std::size_t DriverSymbolCount() noexcept;
// nullptr when index >= DriverSymbolCount().
const char* DriverSymbolName(std::size_t index) noexcept;
// Address the exported symbol resolves to inside this library (the hand-written
// implementation when there is one, else the generated stub; for the cudbg*
// debugger globals, the data object); nullptr when out of range.
void* DriverSymbolAddress(std::size_t index) noexcept;
// Index of an exported (ABI) name, or kDriverSymbolCount when not exported.
std::size_t FindDriverSymbolIndex(std::string_view abi_name) noexcept;
// Address for an exported (ABI) name such as "cuMemAlloc_v2"; nullptr when the
// real driver does not export that name.
void* FindDriverSymbol(std::string_view abi_name) noexcept;

// cuda.h renames API names to ABI names with macros
// (`#define cuMemAlloc cuMemAlloc_v2`,
//  `#define cuMemcpyHtoD __CUDA_API_PTDS(cuMemcpyHtoD_v2)`, ...).
struct ApiAbiAlias {{
  const char* api_name;             // name as written in source, e.g. "cuMemcpyHtoD"
  const char* abi_name;             // default (legacy stream), e.g. "cuMemcpyHtoD_v2"
  const char* per_thread_abi_name;  // e.g. "cuMemcpyHtoD_v2_ptds"; nullptr if none
}};
// nullptr when api_name has no renaming macro.
const ApiAbiAlias* FindApiAbiAlias(std::string_view api_name) noexcept;

// Resolution for cuGetProcAddress: an aliased API name maps to its ABI name
// (the per-thread one when per_thread_default_stream and one exists); any
// other name resolves to itself if exported; otherwise nullptr.
//
// NOTE: not yet version-aware.  The real driver also selects older ABI
// variants by the caller's cudaVersion (e.g. "cuMemAlloc" below 3020 ->
// cuMemAlloc, "cuStreamBeginCapture" below 10010 -> cuStreamBeginCapture /
// _ptsz); that needs the PFN_*_vNNNN data in cudaTypedefs.h and comes later.
void* ResolveProcAddress(std::string_view api_name,
                         bool per_thread_default_stream) noexcept;

}}  // namespace curelay::frontend
"""


def emit_table_cc(names: list[str], aliases: list[Alias], banner: str) -> str:
    out = [banner, """\

#include "driver_table.h"

#include <algorithm>
#include <cstddef>
#include <string_view>

// Uniform declarations (see driver_stubs.cc): only the symbol name matters.
// cuda.h is deliberately not included in this file.
extern "C" {
"""]
    for n in names:
        if n in DATA_SYMBOLS:
            out.append(f"extern unsigned char {n}[];  // data\n")
        else:
            out.append(f"int {n}(void);\n")
    out.append("""}  // extern "C"

namespace curelay::frontend {
namespace {

using EntryFn = int (*)(void);

struct DriverSymbol {
  const char* name;
  EntryFn fn;  // resolves to the strong definition when one is linked in
  void* data;  // set instead of fn for the few exported data objects
};

// Sorted by name (byte order) for binary search.
constinit const DriverSymbol kDriverSymbols[] = {
""")
    for n in names:
        if n in DATA_SYMBOLS:
            out.append(f'    {{"{n}", nullptr, {n}}},\n')
        else:
            out.append(f'    {{"{n}", &{n}, nullptr}},\n')
    out.append("""};
static_assert(sizeof(kDriverSymbols) / sizeof(kDriverSymbols[0]) ==
              kDriverSymbolCount);

// Sorted by api_name.
constinit const ApiAbiAlias kApiAbiAliases[] = {
""")
    for a in aliases:
        out.append(f"    {{{_cstr(a.api)}, {_cstr(a.abi)}, {_cstr(a.per_thread_abi)}}},"
                   f"  // {a.where}\n")
    out.append("""};

void* ToVoid(EntryFn fn) noexcept { return reinterpret_cast<void*>(fn); }

}  // namespace

std::size_t DriverSymbolCount() noexcept { return kDriverSymbolCount; }

const char* DriverSymbolName(std::size_t index) noexcept {
  return index < kDriverSymbolCount ? kDriverSymbols[index].name : nullptr;
}

void* DriverSymbolAddress(std::size_t index) noexcept {
  if (index >= kDriverSymbolCount) return nullptr;
  const DriverSymbol& s = kDriverSymbols[index];
  return s.fn != nullptr ? ToVoid(s.fn) : s.data;
}

std::size_t FindDriverSymbolIndex(std::string_view abi_name) noexcept {
  const auto* begin = std::begin(kDriverSymbols);
  const auto* end = std::end(kDriverSymbols);
  const auto* it = std::lower_bound(
      begin, end, abi_name, [](const DriverSymbol& s, std::string_view n) {
        return std::string_view(s.name) < n;
      });
  if (it == end || std::string_view(it->name) != abi_name) {
    return kDriverSymbolCount;
  }
  return static_cast<std::size_t>(it - begin);
}

void* FindDriverSymbol(std::string_view abi_name) noexcept {
  return DriverSymbolAddress(FindDriverSymbolIndex(abi_name));
}

const ApiAbiAlias* FindApiAbiAlias(std::string_view api_name) noexcept {
  const auto* begin = std::begin(kApiAbiAliases);
  const auto* end = std::end(kApiAbiAliases);
  const auto* it = std::lower_bound(
      begin, end, api_name, [](const ApiAbiAlias& a, std::string_view n) {
        return std::string_view(a.api_name) < n;
      });
  if (it == end || std::string_view(it->api_name) != api_name) return nullptr;
  return it;
}

void* ResolveProcAddress(std::string_view api_name,
                         bool per_thread_default_stream) noexcept {
  // The fallback for names cudaTypedefs.h gives no versions (api/proc_address.cc resolves versioned ones first).
  if (const ApiAbiAlias* alias = FindApiAbiAlias(api_name)) {
    if (per_thread_default_stream && alias->per_thread_abi_name != nullptr) {
      return FindDriverSymbol(alias->per_thread_abi_name);
    }
    return FindDriverSymbol(alias->abi_name);
  }
  return FindDriverSymbol(api_name);
}

}  // namespace curelay::frontend
""")
    return "".join(out)


def emit_version_script(names: list[str], banner: str) -> str:
    body = "".join(f"    {n};\n" for n in names)
    # Anonymous version node: the real libcuda.so.1 exports these names without
    # symbol versions, and binaries linked against it reference them unversioned.
    return ("/* " + banner.replace("// ", "").replace("\n", "\n   ").rstrip() + " */\n"
            "{\n  global:\n" + body + "  local:\n    *;\n};\n")


def write_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, path)


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------

def cmd_generate(args: argparse.Namespace) -> int:
    names = read_exports(args.exports)
    info = load_headers(args.cuda_h, args.extra_header)
    aliases, problems = build_aliases(info, set(names))
    for p in problems:
        print(f"gen_entry_points: warning: {p}", file=sys.stderr)
    banner = _banner(info, [args.cuda_h, *args.extra_header, args.exports])
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    forms = {}
    if args.typedefs_h is not None:
        forms = per_thread_forms(args.typedefs_h.read_text(encoding="utf-8"), set(names))
        write_file(out / "per_thread_forms.cc", emit_per_thread_forms(forms, banner))
    write_file(out / "driver_stubs.cc", emit_stubs(names, banner, set(forms)))
    write_file(out / "driver_table.h", emit_table_h(names, banner))
    write_file(out / "driver_table.cc", emit_table_cc(names, aliases, banner))
    write_file(out / "libcuda.map", emit_version_script(names, banner))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    names = read_exports(args.exports)
    exports = set(names)
    info = load_headers(args.cuda_h, args.extra_header)
    aliases, problems = build_aliases(info, exports)
    print(f"exports: {len(names)}; CUDA_VERSION {info.cuda_version}")
    print(f"API->ABI aliases: {len(aliases)} "
          f"({sum(a.per_thread_abi is not None for a in aliases)} with a per-thread variant)")
    for a in aliases:
        print(f"  {a.api:40} {a.abi:40} {a.per_thread_abi or '-'}")
    print(f"\nalias problems: {len(problems)}")
    for p in problems:
        print("  " + p)
    print(f"\ncu* macros ignored because of their #if context: {len(info.skipped)}")
    for m, ctx in info.skipped:
        print(f"  {m.where}: {m.name} -> {m.rhs}   [{ctx}]")
    # Names a header declares, after renaming (both stream modes), plus raw names
    # (the __CUDA_API_VERSION_INTERNAL section declares old ABI names directly).
    pt_env = {**info.legacy, **info.per_thread}
    declared = set(info.declared)
    for d in info.declared:
        declared.add(expand(d, info.legacy, False))
        declared.add(expand(d, pt_env, True))
    alias_targets = {a.abi for a in aliases} | {a.per_thread_abi for a in aliases if a.per_thread_abi}
    undeclared = sorted(exports - declared - alias_targets)
    print(f"\nexported but not declared as a function in the headers: {len(undeclared)}")
    for n in undeclared:
        print("  " + n)
    not_exported = sorted(d for d in declared - exports if d.startswith("cu"))
    print(f"\ndeclared (after renaming) but not exported: {len(not_exported)}")
    for n in not_exported:
        print("  " + n)
    pt_exports = sorted(n for n in names if n.endswith(("_ptds", "_ptsz")))
    unmapped_pt = [n for n in pt_exports if n not in alias_targets]
    print(f"\nexported _ptds/_ptsz names: {len(pt_exports)}; not reachable via a 13.0 "
          f"macro (older API versions): {len(unmapped_pt)}")
    for n in unmapped_pt:
        print("  " + n)
    return 0


def cmd_check_exports(args: argparse.Namespace) -> int:
    expected = set(read_exports(args.exports))
    res = subprocess.run([args.nm, "-D", "--defined-only", "--format=posix", str(args.library)],
                         check=True, capture_output=True, text=True)
    actual: dict[str, str] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            actual[parts[0].split("@")[0]] = parts[1]
    missing = sorted(expected - actual.keys())
    extra = sorted(actual.keys() - expected)
    for n in missing:
        print(f"check-exports: MISSING {n} (hidden strong definition? forgot "
              "visibility(\"default\")?)", file=sys.stderr)
    for n in extra:
        print(f"check-exports: UNEXPECTED export {n}", file=sys.stderr)
    # nm: T = strong function (implemented), W = weak function (generated stub),
    # V = weak object (generated debugger global), D/B = strong object.
    kinds = [actual[n] for n in expected if n in actual]
    stubs = sum(k == "W" for k in kinds)
    data = sum(k in ("V", "v", "D", "B") for k in kinds)
    print(f"check-exports: {args.library.name}: {len(kinds)}/{len(expected)} exported: "
          f"{len(kinds) - stubs - data} implemented, {stubs} weak (not-supported stubs and generated per-thread "
          "forms), "
          f"{data} data objects")
    return 1 if missing or extra else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def add_inputs(p: argparse.ArgumentParser) -> None:
        p.add_argument("--cuda-h", type=Path, required=True, help="path to cuda.h")
        p.add_argument("--extra-header", type=Path, action="append", default=[],
                       help="more driver headers with renaming macros (cudaGL.h, ...)")
        p.add_argument("--exports", type=Path, required=True, help="driver_exports.txt")

    g = sub.add_parser("generate", help="write generated sources")
    add_inputs(g)
    g.add_argument("--out-dir", type=Path, required=True)
    g.add_argument("--typedefs-h", type=Path, help="cudaTypedefs.h: also write per_thread_forms.cc")
    g.set_defaults(func=cmd_generate)

    r = sub.add_parser("report", help="print header/export analysis")
    add_inputs(r)
    r.set_defaults(func=cmd_report)

    c = sub.add_parser("check-exports", help="verify a built library's exports")
    c.add_argument("--exports", type=Path, required=True)
    c.add_argument("--nm", default="nm")
    c.add_argument("library", type=Path)
    c.set_defaults(func=cmd_check_exports)

    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
