"""Opens a package of paged-attention sites with the runtime and checks
launches without a GPU (package-paged.test): the launch configuration, and
the errors of bad paged arguments."""

import sys

import kiln
from kiln.runtime import DType, PagedAttentionArgs

package = kiln.Package(sys.argv[1])
for site in package.sites:
    print(site.name, site.kernel, site.dtype, site.head_dim, site.v_head_dim,
          f"{site.q_heads}/{site.kv_heads}", f"paged={site.paged}",
          f"page_size={site.page_size}", f"causal={site.causal}")

site = package.site("attention_0")


def args(**change):
    a = PagedAttentionArgs()
    for name in ("q", "key_cache", "value_cache", "out", "page_table", "kv_lens"):
        setattr(a, name, 0x1000)
    for name in ("q", "key_cache", "value_cache", "out"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads, a.q_len = 8, 32, 8, 1
    a.head_dim, a.num_pages, a.page_size, a.max_pages = 128, 1024, 16, 128
    a.q_strides[:] = [32 * 128, 128, 128, 1]
    a.out_strides[:] = [32 * 128, 128, 128, 1]
    a.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.page_table_strides[:] = [128, 1]
    for name, value in change.items():
        if isinstance(value, list):
            getattr(a, name)[:] = value
        else:
            setattr(a, name, value)
    return a


config = site.check_paged(args())
print(f"grid {tuple(config.grid)} block {tuple(config.block)}")
for change in ({"page_size": 8}, {"page_table": 0}, {"kv_lens": 0x1002},
               {"max_pages": 0}, {"page_table_strides": [64, 1]},
               {"key_cache_dtype": int(DType.F16)}, {"head_dim": 64}):
    try:
        site.check_paged(args(**change))
        print(change, "accepted")
    except kiln.KilnError as error:
        print(change, "->", error)
# Caches stored head-major ([num_pages, Hkv, page_size, D]) are launched
# through their strides.
head_major = [8 * 16 * 128, 128, 16 * 128, 1]
config = site.check_paged(args(key_cache_strides=head_major,
                               value_cache_strides=head_major))
print(f"head-major caches: grid {tuple(config.grid)}")
try:
    site.check(site.new_args())
except kiln.KilnError as error:
    print("attention launch ->", error)
