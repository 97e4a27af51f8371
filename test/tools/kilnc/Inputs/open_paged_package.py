"""Opens a package of paged-attention sites with the runtime and checks
launches without a GPU (package-paged.test): the launch configuration, and
the errors of bad paged arguments."""

import sys

import kiln
from kiln.runtime import DType
from paged_args import paged_args as args

package = kiln.Package(sys.argv[1])
for site in package.sites:
    print(site.name, site.kernel, site.dtype, site.head_dim, site.v_head_dim,
          f"{site.q_heads}/{site.kv_heads}", f"paged={site.paged}",
          f"page_size={site.page_size}", f"causal={site.causal}")

site = package.site("attention_0")


config = site.check_paged(args())
print(f"grid {tuple(config.grid)} block {tuple(config.block)}")
for change in ({"page_size": 8}, {"page_table": 0}, {"kv_lens": 0x1002},
               {"max_pages": 0}, {"page_table_strides": [64, 1]},
               {"key_cache_dtype": int(DType.F16)}, {"head_dim": 64},
               {"total_kv_len": -1}, {"total_kv_len": 8 * 128 * 16 + 1}):
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
