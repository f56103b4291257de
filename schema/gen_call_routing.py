#!/usr/bin/env python3
"""Generates what each side needs to know per call from schema/curelay.fbs (see the attributes declared there).

Usage: gen_call_routing.py <curelay.fbs> executor|client <output-directory>

executor: two files, included by executor/session.h and executor/session.cc:
  call_handlers.inc  one handler declaration per call of the union Call:
                     `Outcome <Call>(const wire::<Call>& call[, std::span<const uint8_t> payload]);`
  call_routing.inc   `CallNeedsContext(wire::Call)` and the dispatch cases of Session::Handle's switch
  Calls marked by_hand get neither (Session::Handle treats them itself); a call marked no_context is handled
  without making the request's context current; payload adds the payload frame to the handler's arguments.
client: call_traits.inc, included by frontend/client/client.cc: `CallReachesMappedMemory(wire::Call)` and
  `CallSynchronizes(wire::Call)`, from the reaches_mapped_memory and synchronizing attributes.
"""
import os
import re
import sys

KNOWN_ATTRIBUTES = {"no_context", "payload", "by_hand", "reaches_mapped_memory", "synchronizing"}


def parse(schema_text):
    text = re.sub(r"//[^\n]*", "", schema_text)
    tables = {}
    for match in re.finditer(r"\btable\s+(\w+)\s*(?:\(([^)]*)\))?\s*\{", text):
        attributes = set()
        for item in (match.group(2) or "").split(","):
            item = item.strip()
            if not item:
                continue
            name = item.split(":")[0].strip()
            if name in KNOWN_ATTRIBUTES:
                attributes.add(name)
        tables[match.group(1)] = attributes
    union = re.search(r"\bunion\s+Call\s*\{([^}]*)\}", text)
    if union is None:
        sys.exit("gen_call_routing: no `union Call` in the schema")
    calls = [name.strip() for name in union.group(1).split(",") if name.strip()]
    missing = [call for call in calls if call not in tables]
    if missing:
        sys.exit(f"gen_call_routing: union Call names tables the schema lacks: {missing}")
    return [(call, tables[call]) for call in calls]


def write_if_changed(path, content):
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == content:
                return
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as out:
        out.write(content)


HEADER = "// Generated from schema/curelay.fbs by schema/gen_call_routing.py: do not edit.\n"


def predicate(name, calls, attribute):
    lines = [f"inline bool {name}(wire::Call call) {{\n  switch (call) {{\n"]
    lines += [f"    case wire::Call::{call}:\n" for call, attributes in calls if attribute in attributes]
    lines.append("      return true;\n    default:\n      return false;\n  }\n}\n")
    return "".join(lines)


def executor_files(calls):
    handlers = [HEADER]
    routing = [HEADER, "inline bool CallNeedsContext(wire::Call call) {\n  switch (call) {\n"]
    routing += [f"    case wire::Call::{call}:\n" for call, attributes in calls if "no_context" in attributes]
    routing.append("      return false;\n    default:\n      return true;\n  }\n}\n\n")
    routing.append("#define CURELAY_CALL_DISPATCH_CASES \\\n")
    for call, attributes in calls:
        if "by_hand" in attributes:
            continue
        payload = "payload" in attributes
        handlers.append(f"Outcome {call}(const wire::{call}& call"
                        f"{', std::span<const uint8_t> payload' if payload else ''});\n")
        routing.append(f"  case wire::Call::{call}: \\\n"
                       f"    outcome = {call}(*request.call_as_{call}(){', payload' if payload else ''}); \\\n"
                       f"    break; \\\n")
    routing.append("\n")
    return {"call_handlers.inc": "".join(handlers), "call_routing.inc": "".join(routing)}


def client_files(calls):
    return {"call_traits.inc": HEADER + predicate("CallReachesMappedMemory", calls, "reaches_mapped_memory") + "\n" +
            predicate("CallSynchronizes", calls, "synchronizing")}


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("executor", "client"):
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as schema:
        calls = parse(schema.read())
    files = executor_files(calls) if sys.argv[2] == "executor" else client_files(calls)
    os.makedirs(sys.argv[3], exist_ok=True)
    for name, content in files.items():
        write_if_changed(os.path.join(sys.argv[3], name), content)


if __name__ == "__main__":
    main()
