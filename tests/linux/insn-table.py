#!/usr/bin/env python3
"""Instruction table of a static x86-64 binary, from objdump -d (the ground truth for the Linux
guest's branch-stack and precise-sample checks in tests/linux/perf_pt.sh).

usage: insn-table.py BINARY > TABLE

One line per instruction, in address order: ADDR KIND TARGET (hex without 0x, TARGET "-" when
the instruction has no direct target). KIND:
  N  not a control transfer (also SYSCALL/SYSENTER/INT n: they return to the next instruction)
  C  conditional branch (Jcc, JrCXZ, LOOP*): taken to TARGET or falls through
  J  direct JMP to TARGET          L  direct CALL to TARGET
  I  indirect JMP                  K  indirect CALL
  R  RET (near)                    F  any other transfer (far JMP/CALL/RET, IRET, UD2, HLT)
"""
import re
import subprocess
import sys

PREFIXES = {"cs", "ds", "ss", "es", "fs", "gs", "data16", "addr32", "rex", "rex.w", "lock", "rep",
            "repz", "repe", "repnz", "repne", "notrack", "bnd", "xacquire", "xrelease"}
LINE = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")


def classify(text):
    words = text.split()
    while words and words[0].lower() in PREFIXES:
        words = words[1:]
    if not words:
        return "N", "-"
    m, ops = words[0], " ".join(words[1:])
    target = "-"
    t = re.match(r"^([0-9a-f]+)\s*(<.*>)?$", ops)
    if t:
        target = t.group(1)
    if m in ("jmp", "jmpq"):
        return ("I", "-") if ops.startswith("*") else ("J", target)
    if m in ("call", "callq"):
        return ("K", "-") if ops.startswith("*") else ("L", target)
    if m in ("ret", "retq"):
        return "R", "-"
    if m.startswith("loop") or m in ("jrcxz", "jecxz", "jcxz") or (m.startswith("j") and target != "-"):
        return "C", target
    if m in ("ljmp", "lcall", "lret", "lretq", "iret", "iretq", "iretl", "sysret", "sysretq", "ud2", "hlt",
             "jmpf", "callf"):
        return "F", "-"
    return "N", "-"


def main():
    out = subprocess.run(["objdump", "-d", "-w", "--no-show-raw-insn", sys.argv[1]], check=True,
                         capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        text = m.group(2).split("#")[0].strip()
        if text.startswith("(bad)") or not text:
            continue
        kind, target = classify(text)
        rows[int(m.group(1), 16)] = (kind, target)
    for addr in sorted(rows):
        kind, target = rows[addr]
        print(f"{addr:x} {kind} {target}")


if __name__ == "__main__":
    main()
