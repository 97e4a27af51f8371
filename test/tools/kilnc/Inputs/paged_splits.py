"""The split counts the runtime chooses for paged launches of a package
(package-paged.test), against a stand-in driver that answers 132 SMs and two
resident blocks an SM: a grid with a block on all but a sixteenth of the SMs
runs unsplit, smaller grids split to two blocks an SM."""

import sys

import kiln
from kiln.runtime import DType, PagedAttentionArgs

package = kiln.Package(sys.argv[1])
site = package.site("attention_0")  # GQA 32/8, head dim 128, pages of 16


def args(batch, max_pages):
    a = PagedAttentionArgs()
    for name in ("q", "key_cache", "value_cache", "out", "page_table",
                 "kv_lens"):
        setattr(a, name, 0x1000)
    for name in ("q", "key_cache", "value_cache", "out"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads, a.q_len = batch, 32, 8, 1
    a.head_dim, a.page_size, a.max_pages = 128, 16, max_pages
    a.num_pages = batch * max_pages
    a.q_strides[:] = [32 * 128, 128, 128, 1]
    a.out_strides[:] = [32 * 128, 128, 128, 1]
    a.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.page_table_strides[:] = [max_pages, 1]
    a.workspace, a.workspace_bytes = 0x100000, 1 << 40
    return a


for batch, keys in ((16, 16384), (15, 16384), (8, 1024), (4, 15840),
                    (1, 32768)):
    print(f"{batch * 8} blocks, {keys} keys: {site.splits(args(batch, keys // 16))} splits")
