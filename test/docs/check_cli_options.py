#!/usr/bin/env python3
"""Every option `kilnc --help` lists (its own options, and --help and
--version) is named in docs/cli.md as `--NAME` (or `-NAME` for one-letter
options).

    check_cli_options.py KILNC CLI_MD
"""

import re
import subprocess
import sys
from pathlib import Path


def help_options(kilnc: str) -> list[str]:
    text = subprocess.run([kilnc, "--help"], capture_output=True, text=True,
                          check=True).stdout
    # An option line: two spaces, dashes, the name, then `=<value>`, spaces
    # and the description; its values (`=name`) are indented further.
    return sorted({match.group(1) for match in
                   re.finditer(r"^  (--?[A-Za-z][\w-]*)", text, re.M)})


def main() -> int:
    kilnc, cli_md = sys.argv[1], sys.argv[2]
    doc = Path(cli_md).read_text(encoding="utf-8")
    options = help_options(kilnc)
    missing = [option for option in options
               if not re.search(re.escape(option) + r"(?![\w-])", doc)]
    for option in missing:
        print(f"kilnc {option} is not in docs/cli.md")
    print(f"{len(options) - len(missing)} of {len(options)} options documented")
    return 1 if missing or not options else 0


if __name__ == "__main__":
    sys.exit(main())
