"""Prints the kernel choice of each site of a `kilnc --report=json` report
(read from stdin), or of each kernel of a manifest (the path given): a line
per site (kernel) and target, then its reasons, each on its own line."""

import json
import sys


def main() -> None:
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as f:
            manifest = json.load(f)
        for kernel in manifest["kernels"]:
            for chip, why in sorted(kernel.get("why", {}).items()):
                print(f"kernel {kernel['name']} {chip}")
                for reason in why:
                    print(f"  why: {reason}")
        return
    report = json.load(sys.stdin)
    for entry in report["kernels"]:
        index = entry["site"]
        for chip, choice in entry["targets"].items():
            if "error" in choice:
                print(f"site {index} {chip} error: {choice['error']}")
                continue
            cap = f" {choice['blocks_per_sm']} {choice['from']}" if "from" in choice else ""
            print(f"site {index} {chip} {choice['kernel']} {choice['variant']}{cap}"
                  f" rows {choice['rows_per_block']} keys {choice['kv_block_size']}"
                  f" ws {choice['warp_specialized_kernel']}")
            for reason in choice["why"]:
                print(f"  why: {reason}")


if __name__ == "__main__":
    main()
