"""Truncates an ONNX file at N offsets and checks that the importer rejects
every prefix with exit status 1 and an error (no crash, no hang)."""

import os
import subprocess
import sys
import tempfile


def main() -> int:
    tool, model, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = open(model, "rb").read()
    offsets = sorted({max(0, len(data) * k // count) for k in range(count)})
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cut.onnx")
        for offset in offsets:
            with open(path, "wb") as out:
                out.write(data[:offset])
            proc = subprocess.run([tool, "--import-onnx", path, "-o",
                                   os.devnull], capture_output=True,
                                  text=True, timeout=60)
            if proc.returncode != 1 or "error:" not in proc.stderr:
                failures.append((offset, proc.returncode, proc.stderr[-300:]))
    for offset, code, err in failures:
        print(f"offset {offset}: exit {code}: {err}")
    print(f"{len(offsets) - len(failures)}/{len(offsets)} truncations "
          f"rejected cleanly")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
