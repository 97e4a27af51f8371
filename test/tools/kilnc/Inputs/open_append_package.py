"""Opens the paged sites of test/gpu/ragged_sites.mlir with the runtime and
checks the cache append without a GPU (package-append.test): the launch
configuration (one block a new token), an empty append, and the errors of
bad arguments, each named."""

import sys

import kiln
from kiln.runtime import DType, PagedAppendArgs

package = kiln.Package(sys.argv[1])
site = package.site("attention_4")  # uniform, bf16, d128, pages of 16


def args(**change):
    a = PagedAppendArgs()
    for name in ("key", "value", "key_cache", "value_cache", "page_table",
                 "kv_lens", "new_offsets"):
        setattr(a, name, 0x1000)
    for name in ("key", "value", "key_cache", "value_cache"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.kv_heads, a.total_new = 3, 8, 70
    a.head_dim, a.v_head_dim = 128, 0
    a.num_pages, a.page_size, a.max_pages = 40, 16, 10
    a.key_strides[:] = [8 * 128, 128, 1]
    a.value_strides[:] = [8 * 128, 128, 1]
    a.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.page_table_strides[:] = [10, 1]
    for name, value in change.items():
        if name.endswith("_strides"):
            getattr(a, name)[:] = value
        else:
            setattr(a, name, value)
    return a


config = site.check_append(args())
print("grid", config.grid, "block", config.block)
print("empty", site.check_append(args(total_new=0)).grid)
for change in ({"key": 0}, {"new_offsets": 0}, {"kv_lens": 0x1002},
               {"key_dtype": int(DType.F16)}, {"head_dim": 64},
               {"v_head_dim": 64}, {"kv_heads": 4}, {"page_size": 32},
               {"batch": 0}, {"total_new": -1}, {"key": 0x1001},
               {"key_strides": [1024, 128, 2]},
               {"value_cache_strides": [-1, 1024, 128, 1]},
               {"page_table_strides": [10, 2]}):
    try:
        site.check_append(args(**change))
        print(change, "-> accepted")
    except kiln.KilnError as error:
        print(change, "->", error)
ragged = package.site("attention_0")
print("ragged grid", ragged.check_append(args()).grid)
