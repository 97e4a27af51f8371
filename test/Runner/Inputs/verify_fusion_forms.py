"""Verifies every case of a kiln-fuse-attention test file on the CPU: each
`// -----` chunk is fused with kiln-opt, and every function in it is checked
with kiln-cpu-runner --verify-fusion (outputs and sites)."""

import os
import re
import subprocess
import sys

kiln_opt, runner, source, workdir = sys.argv[1:5]
os.makedirs(workdir, exist_ok=True)
chunks = open(source).read().split("// -----")
total = failures = 0
for index, chunk in enumerate(chunks):
    unfused = os.path.join(workdir, f"case{index}.mlir")
    fused = os.path.join(workdir, f"case{index}.fused.mlir")
    with open(unfused, "w") as f:
        f.write(chunk)
    proc = subprocess.run([kiln_opt, unfused, "--kiln-fuse-attention", "-o",
                           fused], capture_output=True, text=True)
    names = re.findall(r"^func\.func @(\w+)", chunk, re.M)
    for name in names:
        total += 1
        if proc.returncode != 0:
            print(f"FAIL {name}: kiln-opt failed\n{proc.stderr}")
            failures += 1
            continue
        run = subprocess.run([runner, unfused, f"--func={name}",
                              f"--verify-fusion={fused}"],
                             capture_output=True, text=True)
        lines = run.stdout.strip().splitlines()
        summary = lines[-1] if lines else ""
        if run.returncode != 0:
            print(f"FAIL {name}: {summary}\n{run.stdout}{run.stderr[-2000:]}")
            failures += 1
        else:
            print(f"ok {name}: {summary}")
print(f"{total - failures} of {total} passed")
sys.exit(1 if failures else 0)
