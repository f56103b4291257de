#!/usr/bin/env python3
"""Writes passthrough.S and names.h for a logging pass-through libcuda.so.1 (GPU-host probe, not product).

Every function the real driver exports jumps to it through real_tab, except the ones export_trace.c wraps.
Also writes slot trampolines (slot_tramp.S): each calls the real slot, then logs (table, slot, result, arguments,
what the pointer arguments point to afterwards, caller).
With --calls, every exported function is a logging trampoline instead (call_tramp.S): it runs the real function
and logs its name and result (export_trace.c, TRACE_CALLS), so two runs can be diffed call by call.
Usage: gen_passthrough.py <real libcuda.so.1> [--calls]
"""
import subprocess
import sys

TABLES, SLOTS = 16, 48
WRAPPED = {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable"}

real = sys.argv[1]
calls = "--calls" in sys.argv[2:]
nm = subprocess.run(["nm", "-D", "--defined-only", real], capture_output=True, text=True, check=True).stdout
symbols = sorted({p[2].split("@")[0] for p in (l.split() for l in nm.splitlines()) if len(p) == 3 and p[1] in "TtWi"})

with open("passthrough.S", "w") as f:
    f.write('.section .note.GNU-stack,"",@progbits\n.text\n')
    for i, s in enumerate(symbols):
        if s in WRAPPED:
            continue
        f.write(f".globl {s}\n.type {s},@function\n{s}:\n")
        f.write(f"  jmp fn_{i}\n" if calls else f"  jmp *real_tab+{8 * i}(%rip)\n")
    f.write(f".data\n.globl real_tab\n.hidden real_tab\nreal_tab:\n  .zero {8 * len(symbols)}\n")

with open("names.h", "w") as f:
    f.write("static const char* kNames[] = {\n" + ",\n".join(f'"{s}"' for s in symbols) + "};\n")
    f.write(f"enum {{ kNumNames = {len(symbols)}, kMaxTables = {TABLES}, kMaxSlots = {SLOTS} }};\n")

# A slot trampoline calls the real slot (arguments untouched in their registers; no slot takes stack arguments),
# then slot_log(k, result, saved) with the six integer arguments and the return address saved in its frame.
with open("slot_tramp.S", "w") as f:
    f.write('.section .note.GNU-stack,"",@progbits\n.text\n')
    for k in range(TABLES * SLOTS):
        f.write(f""".globl slot_{k}
.hidden slot_{k}
slot_{k}:
  push %rbp
  mov %rsp, %rbp
  sub $64, %rsp
  mov %rdi, 0(%rsp); mov %rsi, 8(%rsp); mov %rdx, 16(%rsp); mov %rcx, 24(%rsp); mov %r8, 32(%rsp); mov %r9, 40(%rsp)
  mov 8(%rbp), %rax
  mov %rax, 48(%rsp)
  call *slot_real+{8 * k}(%rip)
  mov %rax, 56(%rsp)
  mov ${k}, %edi
  mov %rax, %rsi
  mov %rsp, %rdx
  call slot_log
  mov 56(%rsp), %rax
  leave
  ret
""")
    f.write(f".data\n.globl slot_real\n.hidden slot_real\nslot_real:\n  .zero {8 * TABLES * SLOTS}\n")
    f.write(".section .data.rel.ro\n.globl slot_tramps\n.hidden slot_tramps\nslot_tramps:\n")
    for k in range(TABLES * SLOTS):
        f.write(f"  .quad slot_{k}\n")
# A function trampoline keeps the caller's stack arguments where the real function expects them: it moves the
# return address to a per-thread stack (fn_enter), calls the real function from the same stack position, logs the
# result (fn_exit, which hands the return address back) and returns. The C helpers touch no vector registers.
with open("call_tramp.S", "w") as f:
    f.write('.section .note.GNU-stack,"",@progbits\n.text\n')
    for i in range(len(symbols)):
        f.write(f""".globl fn_{i}
.hidden fn_{i}
fn_{i}:
  pop %r11
  push %rdi; push %rsi; push %rdx; push %rcx; push %r8; push %r9
  mov ${i}, %edi
  mov %r11, %rsi
  mov %rsp, %rdx
  call fn_enter
  pop %r9; pop %r8; pop %rcx; pop %rdx; pop %rsi; pop %rdi
  call *real_tab+{8 * i}(%rip)
  push %rax
  sub $8, %rsp
  mov ${i}, %edi
  mov %rax, %rsi
  call fn_exit
  add $8, %rsp
  mov %rax, %r11
  pop %rax
  push %r11
  ret
""")
    f.write(".section .data.rel.ro\n.globl fn_tramps\n.hidden fn_tramps\nfn_tramps:\n")
    for i in range(len(symbols)):
        f.write(f"  .quad fn_{i}\n")
print(len(symbols), "symbols")
