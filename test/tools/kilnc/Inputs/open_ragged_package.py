"""Opens the ragged sites of test/gpu/ragged_sites.mlir with the runtime and
checks, without a GPU (package-ragged.test): the site's facts, the plan
(items heaviest first, empty items after them, bad offsets and a plan too
small refused), the launch configuration (grid x the plan's items), and the
errors of ragged arguments."""

import ctypes
import sys

import kiln
from kiln.runtime import DType, PagedAttentionArgs

package = kiln.Package(sys.argv[1])
site = package.site("attention_0")
print(site.name, site.kernel, f"ragged={site.ragged}", f"paged={site.paged}",
      f"{site.q_heads}/{site.kv_heads}", site.head_dim)
uniform = package.site("attention_4")
print(uniform.name, f"ragged={uniform.ragged}")

# A chunk of 40 queries against 100 keys, three decodes, an empty sequence:
# at GQA 4 the chunk's 160 rows are 3 blocks of 64.
offsets = [0, 40, 41, 41, 42, 43]
lens = [100, 5000, 7, 300, 2]


def plan_of(offsets, lens, capacity):
    host = (ctypes.c_int32 * (2 * capacity))()
    items = ctypes.c_int64()
    o = (ctypes.c_int32 * len(offsets))(*offsets)
    n = None if lens is None else (ctypes.c_int32 * len(lens))(*lens)
    status = package._lib.kiln_site_plan_paged_attention(
        site._handle, o, n, len(offsets) - 1, 32, 8, host, capacity,
        ctypes.byref(items))
    if status != 0:
        return "error: " + package._lib.kiln_last_error().decode()
    return [(host[2 * i], host[2 * i + 1]) for i in range(capacity)], \
        items.value


print("capacity", site.plan_capacity(5, 43))
print("plan", plan_of(offsets, lens, site.plan_capacity(5, 43)))
print("by queries", plan_of(offsets, None, 6))
print("decreasing", plan_of([0, 5, 3], [9, 9], 4))
print("first offset", plan_of([2, 5, 6], [9, 9], 4))
print("too small", plan_of(offsets, lens, 5))
print("kv_lens short", plan_of([0, 10, 11], [4, 9], 4))
try:
    uniform.plan_capacity(2, 10)
except kiln.KilnError as error:
    print("uniform plan ->", error)


def args(**change):
    a = PagedAttentionArgs()
    for name in ("q", "key_cache", "value_cache", "out", "page_table",
                 "kv_lens", "q_offsets"):
        setattr(a, name, 0x1000)
    a.plan = 0x2000
    a.plan_items = 7
    for name in ("q", "key_cache", "value_cache", "out"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads, a.q_len = 5, 32, 8, 43
    a.head_dim, a.page_size, a.max_pages, a.num_pages = 128, 16, 320, 2000
    a.q_strides[:] = [0, 128, 32 * 128, 1]
    a.out_strides[:] = [0, 128, 32 * 128, 1]
    a.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.page_table_strides[:] = [320, 1]
    for name, value in change.items():
        setattr(a, name, value)
    return a


config = site.check_paged(args())
print(f"grid {tuple(config.grid)} block {tuple(config.block)}")
for change in ({"q_offsets": 0}, {"plan": 0}, {"plan": 0x2004},
               {"plan_items": -1}):
    try:
        site.check_paged(args(**change))
        print(change, "accepted")
    except kiln.KilnError as error:
        print(change, "->", error)
try:
    uniform.check_paged(args(q_strides=None) if False else args())
except kiln.KilnError as error:
    print("uniform with a plan ->", error)
print("empty plan", tuple(site.check_paged(args(plan_items=0)).grid))

# Offsets past the packed rows the caller names are refused on the host.
try:
    site.plan([0, 5, 9], [10, 10], total_q=8)
except kiln.KilnError as error:
    print("past total_q ->", error)
