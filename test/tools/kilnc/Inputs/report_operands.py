"""Prints the graph values of each site of a `kilnc --report=json` report
(read from stdin), one line each, for FileCheck:

    site 0 query q
    site 0 key k transpose(1,0,2,3)
    site 0 mask hide not
    site 0 output pv
"""

import json
import sys


def step(transform):
    if transform["op"] == "transpose":
        return "transpose(" + ",".join(map(str, transform["perms"])) + ")"
    if transform["op"] == "reshape":
        return "reshape(" + ",".join(map(str, transform["shape"])) + ")"
    if transform["op"] == "cast":
        return "cast(" + transform["dtype"] + ")"
    return transform["op"]


report = json.loads(sys.stdin.read())
for index, site in enumerate(report["sites"]):
    entries = list(site["operands"].items()) + [("output", site["output"])]
    for role, entry in entries:
        if entry is None:
            continue
        steps = " ".join(step(t) for t in entry["transforms"])
        print(f"site {index} {role} {entry['value']} {steps}".rstrip())
