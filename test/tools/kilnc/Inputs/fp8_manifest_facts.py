"""The FP8 facts of a manifest (package-fp8.test): each site's dtype, cache
dtype and scales; each paged kernel's dtypes and its scale arguments, which
must come last; each append kernel's dtypes, name and scale arguments."""

import json
import sys

manifest = json.load(open(sys.argv[1]))
for site in manifest["sites"]:
    print("site", site["name"], site["dtype"], site["cache_dtype"],
          site["kv_scales"])
for kernel in manifest["kernels"]:
    if kernel["kind"] not in ("paged_attention", "paged_append"):
        continue
    scales = [(a["name"], a["kind"], a.get("dtype")) for a in kernel["args"]
              if a["name"] in ("k_scale", "v_scale")]
    head = (kernel["kind"], kernel["dtype"], kernel.get("cache_dtype"))
    if kernel["kind"] == "paged_append":
        print(*head, f"{kernel['name']}:", scales)
    elif not scales:
        print(*head, "no scales")
    else:
        last = [a["name"] for a in kernel["args"][-2:]] == ["k_scale", "v_scale"]
        print(*head, "scales last:" if last else "scales not last:", scales)
