"""Opens the FP8 paged sites of fp8_paged_sites.mlir with the runtime and
checks them without a GPU (package-fp8.test): the sites' cache dtype and
scales, and the errors of bad FP8 arguments to launches and appends, each
refused on the host before the driver is needed."""

import sys

import kiln
from kiln.runtime import DType
from fp8_args import append, paged

package = kiln.Package(sys.argv[1])
for site in package.sites:
    print(site.name, site.function, site.dtype, f"cache={site.cache_dtype}",
          f"scales={site.kv_scales}")


def attempt(what, call):
    try:
        result = call()
        print(what, "->", "accepted" if result is None else result)
    except kiln.KilnError as error:
        print(what, "->", error)


for name, changes in (
        ("attention_0", ({}, {"k_scale": 0}, {"v_scale": 0},
                         {"num_kv_scales": 1}, {"num_kv_scales": 0},
                         {"k_scale": 0x20002},
                         {"key_cache_dtype": int(DType.BF16)},
                         {"value_cache_dtype": int(DType.F16)},
                         {"q_dtype": int(DType.F8E4M3)},
                         {"key_cache_strides": [16 * 8 * 128, 8 * 128, 129, 1]},
                         {"value_cache_strides": [16 * 8 * 128, 1025, 128, 1]},
                         {"key_cache_strides": [16 * 8 * 128 + 1, 8 * 128,
                                                128, 1]},
                         {"value_cache": 0x10001})),
        ("attention_1", ({}, {"num_kv_scales": 2})),
        ("attention_2", ({}, {"k_scale": 0x20000}, {"num_kv_scales": 1},
                         {"key_cache_dtype": int(DType.F8E4M3)}))):
    site = package.site(name)
    for change in changes:
        attempt(f"{name} {change}",
                lambda: site.check_paged(paged(name, **change)).grid)

# Launches and the debug table check refuse bad scales before the driver
# is loaded (the test runs without one).
heads = package.site("attention_0")
attempt("launch without scales",
        lambda: heads.launch_paged(paged("attention_0", k_scale=0)))
attempt("validate with 1 scale",
        lambda: heads.validate_paged(paged("attention_0", num_kv_scales=1)))
# The Python launch refuses missing scales before it looks at a tensor.
attempt("Site.paged_attention without scales",
        lambda: heads.paged_attention(None, None, None, None, None))
attempt("Site.append_paged_kv with scales on a bf16 site",
        lambda: package.site("attention_2").append_paged_kv(
            None, None, None, None, None, None, None, k_scale=1, v_scale=1))

# The appends: new keys and values in the site's dtype, caches e4m3.
for name, changes in (
        ("attention_0", ({}, {"key_dtype": int(DType.F8E4M3)},
                         {"value_cache_dtype": int(DType.BF16)},
                         {"v_scale": 0}, {"num_kv_scales": 2},
                         {"value_cache_strides": [16 * 8 * 128, 8 * 128,
                                                  127, 1]},
                         {"key_cache": 0x10003}, {"total_new": 0, "k_scale": 0})),
        ("attention_1", ({}, {"num_kv_scales": 8})),
        ("attention_2", ({}, {"k_scale": 0x20000, "v_scale": 0x20100}))):
    site = package.site(name)
    for change in changes:
        attempt(f"append {name} {change}",
                lambda: site.check_append(append(name, **change)).grid)
