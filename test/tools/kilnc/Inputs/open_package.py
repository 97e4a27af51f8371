"""Opens a package with the runtime and prints its sites (package-runtime.test)."""

import ctypes
import sys

import kiln

package = kiln.Package(sys.argv[1])
print("targets", package.targets)
print(f"{len(package.sites)} sites, {len(package.kernels)} kernels")
for site in package.sites:
    extra = ""
    if site.softcap:
        extra += f" softcap={site.softcap}"
    if site.window:
        extra += f" window={site.window}"
    print(site.name, site.kernel, site.dtype, site.head_dim,
          f"{site.q_heads}/{site.kv_heads}", f"causal={site.causal}",
          f"mask={site.mask}", f"layout={site.layout}" + extra)

site = package.site("attention_3")
args = site.new_args()
for name in ("q", "k", "v", "out"):
    setattr(args, name, ctypes.c_void_p(0x1000))
    setattr(args, name + "_dtype", int(kiln.runtime.DType.BF16))
args.batch, args.q_heads, args.kv_heads = 2, 8, 2
args.q_len, args.kv_len, args.head_dim = 1000, 1000, 128
site.set_contiguous_strides(args)
config = site.check(args)
print(f"grid {tuple(config.grid)} block {tuple(config.block)}")
