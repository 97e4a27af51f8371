#!/usr/bin/env python3
"""kilnc's options and docs/cli.md's kilnc table name the same options.

Every option `kilnc --help-hidden` lists (its own options, hidden ones
included, and --help, --version and the like) must head a row of the kilnc
table in docs/cli.md as `--NAME` (or `-NAME` for one-letter options), and
every option a row heads must be one kilnc has: neither can drift from the
other. Options that `kilnc --help` does not show are counted as hidden.

    check_cli_options.py KILNC CLI_MD
"""

import re
import subprocess
import sys
from pathlib import Path

OPTION = r"(--?[A-Za-z][\w-]*)"


def help_options(kilnc: str, flag: str) -> set[str]:
    text = subprocess.run([kilnc, flag], capture_output=True, text=True,
                          check=True).stdout
    # An option line: two spaces, dashes, the name, then `=<value>`, spaces
    # and the description; its values (`=name`) are indented further.
    return {match.group(1) for match in re.finditer("^  " + OPTION, text, re.M)}


def documented_options(cli_md: str) -> set[str]:
    """The options heading the rows of the table under `## kilnc`."""
    doc = Path(cli_md).read_text(encoding="utf-8")
    section = doc.split("\n## kilnc\n", 1)[1].split("\n## ", 1)[0]
    options = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        # The first cell ends at the first `|` outside backquotes.
        first = re.match(r"\|((?:`[^`]*`|[^|`])*)\|", line).group(1)
        options.update(re.findall("`" + OPTION, first))
    return options


def main() -> int:
    kilnc, cli_md = sys.argv[1], sys.argv[2]
    shown = help_options(kilnc, "--help")
    every = help_options(kilnc, "--help-hidden") | shown
    documented = documented_options(cli_md)
    failed = False
    for option in sorted(every - documented):
        print(f"kilnc {option} is not in docs/cli.md")
        failed = True
    for option in sorted(documented - every):
        print(f"docs/cli.md documents {option}, which kilnc does not have")
        failed = True
    print(f"{len(every & documented)} of {len(every)} options documented "
          f"({len(every - shown)} hidden)")
    return 1 if failed or not shown else 0


if __name__ == "__main__":
    sys.exit(main())
