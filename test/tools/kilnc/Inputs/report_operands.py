"""Prints the graph values of each site of a `kilnc --report=json` report
(read from stdin), one line each, for FileCheck:

    site 0 query q
    site 0 key k transpose(1,0,2,3)
    site 0 mask hide not
    site 0 output pv

With --sources, each further source of an operand (a named value farther up
the chain of ops the rewrite can replay) follows on a line of its own:

    site 0 query also q_proj reshape(1,8,2,16) transpose(0,2,1,3)
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
    if transform["op"] in ("mul", "add"):
        return f"{transform['op']}({transform['value']:g})"
    if transform["op"] == "where":
        return f"where({transform['true']:g},{transform['false']:g})"
    if transform["op"] in ("slice", "tile"):
        fields = ("start", "size") if transform["op"] == "slice" else ("multiples",)
        return transform["op"] + "(" + ";".join(
            ",".join(map(str, transform[f])) for f in fields) + ")"
    return transform["op"]


report = json.loads(sys.stdin.read())
for index, site in enumerate(report["sites"]):
    entries = list(site["operands"].items()) + [("output", site["output"])]
    for role, entry in entries:
        if entry is None:
            continue
        steps = " ".join(step(t) for t in entry["transforms"])
        print(f"site {index} {role} {entry['value']} {steps}".rstrip())
        if "--sources" in sys.argv:
            for source in entry.get("sources", [])[1:]:
                steps = " ".join(step(t) for t in source["transforms"])
                print(f"site {index} {role} also {source['value']} {steps}".rstrip())
