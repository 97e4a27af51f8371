"""Opens the sites of packed sequences of test/gpu/packed_sites.mlir with the
runtime and checks, without a GPU (package-packed.test): the site's facts,
the plan from both offsets (items heaviest first, bad key offsets refused),
the launch configuration (grid x the plan's items) and the errors of packed
arguments."""

import ctypes
import sys

import kiln
from kiln.runtime import AttentionArgs, DType, PackedAttentionArgs

package = kiln.Package(sys.argv[1])
site = package.site("attention_0")
print(site.name, site.kernel, f"packed={site.packed}",
      f"ragged={site.ragged}", f"paged={site.paged}",
      f"{site.q_heads}/{site.kv_heads}", site.head_dim, site.batch)


def plan_of(q_offsets, kv_offsets, capacity):
    host = (ctypes.c_int32 * (2 * capacity))()
    items = ctypes.c_int64()
    q = (ctypes.c_int32 * len(q_offsets))(*q_offsets)
    kv = (ctypes.c_int32 * len(kv_offsets))(*kv_offsets)
    status = package._lib.kiln_site_plan_packed_attention(
        site._handle, q, kv, len(q_offsets) - 1, 32, 8, host, capacity,
        ctypes.byref(items))
    if status != 0:
        return "error: " + package._lib.kiln_last_error().decode()
    return [(host[2 * i], host[2 * i + 1]) for i in range(capacity)], \
        items.value


# A chunk of 40 queries against 100 keys, three short sequences, one
# without queries: the keys are 100, 5000, 7, 300 and 2.
q_offsets = [0, 40, 41, 41, 42, 43]
kv_offsets = [0, 100, 5100, 5107, 5407, 5409]
print("plan", plan_of(q_offsets, kv_offsets, site.plan_capacity(5, 43)))
# Fewer keys than queries (cross-attention, a sequence's tail): planned.
print("fewer keys", plan_of([0, 10, 11], [0, 4, 13], 4))
print("kv decreasing", plan_of([0, 5, 9], [0, 7, 3], 4))
print("kv first offset", plan_of([0, 5, 9], [2, 7, 9], 4))
print("too small", plan_of(q_offsets, kv_offsets, 5))
for keyword in ({"kv_lens": [1, 2]}, {}):
    try:
        site.plan([0, 1, 2], **keyword)
    except kiln.KilnError as error:
        print(sorted(keyword), "->", error)


def args(**change):
    a = PackedAttentionArgs()
    for name in ("q", "k", "v", "out", "q_offsets", "kv_offsets"):
        setattr(a, name, 0x1000)
    a.plan = 0x2000
    a.plan_items = 7
    for name in ("q", "k", "v", "out"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads = 5, 32, 8
    a.total_q, a.total_kv, a.head_dim = 43, 5409, 128
    a.q_strides[:] = [32 * 128, 128, 1]
    a.out_strides[:] = [32 * 128, 128, 1]
    a.k_strides[:] = [8 * 128, 128, 1]
    a.v_strides[:] = [8 * 128, 128, 1]
    for name, value in change.items():
        setattr(a, name, value)
    return a


config = site.check_packed(args())
print(f"grid {tuple(config.grid)} block {tuple(config.block)}")
for change in ({"q_offsets": 0}, {"kv_offsets": 0}, {"plan": 0x2004},
               {"plan_items": -1}, {"max_kv_len": 6000},
               {"k_dtype": int(DType.F16)}, {"head_dim": 64},
               {"kv_heads": 5}, {"v_strides": (ctypes.c_int64 * 3)(128, 8, 2)}):
    try:
        site.check_packed(args(**change))
        print({k: (list(v) if not isinstance(v, int) else v)
               for k, v in change.items()}, "accepted")
    except kiln.KilnError as error:
        print({k: (list(v) if not isinstance(v, int) else v)
               for k, v in change.items()}, "->", error)
for change in ({"batch": 0}, {"total_q": 0}, {"plan_items": 0}):
    config = site.check_packed(args(**change))
    print("empty", change, tuple(config.grid))
try:
    site.check(AttentionArgs())
except kiln.KilnError as error:
    print("uniform launch ->", error)
