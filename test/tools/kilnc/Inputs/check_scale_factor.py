"""Opens the package of Inputs/scale_factor_sites.mlir with the runtime and
checks launches without a GPU (package-scale-factor.test): the site with a
run-time scale needs its scale_factor pointer, the site without one refuses
it."""

import sys

import kiln
from kiln.runtime import AttentionArgs, DType

package = kiln.Package(sys.argv[1])


def args(**change):
    a = AttentionArgs()
    for name in ("q", "k", "v", "out"):
        setattr(a, name, 0x1000)
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads = 2, 8, 2
    a.q_len, a.kv_len, a.head_dim = 100, 100, 64
    a.q_strides[:] = [8 * 100 * 64, 100 * 64, 64, 1]
    a.out_strides[:] = [8 * 100 * 64, 100 * 64, 64, 1]
    a.k_strides[:] = [2 * 100 * 64, 100 * 64, 64, 1]
    a.v_strides[:] = [2 * 100 * 64, 100 * 64, 64, 1]
    for name, value in change.items():
        setattr(a, name, value)
    return a


for name in ("attention_0", "attention_1"):
    site = package.site(name)
    for factor in (None, 0x2000):
        try:
            config = site.check(args(scale_factor=factor))
            print(name, "factor" if factor else "none", "grid", tuple(config.grid))
        except kiln.KilnError as error:
            print(name, "factor" if factor else "none", "->", error)
