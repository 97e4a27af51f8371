"""The split counts the runtime chooses for paged launches of a package
(package-paged.test), against a stand-in driver that answers 132 SMs and two
resident blocks an SM: a grid with a block on all but a sixteenth of the SMs
runs unsplit, smaller grids split to two blocks an SM. With the batch's total
length given (total_kv_len), an uneven batch splits more, a batch whose total
says every sequence is the longest chooses as without it, and the workspace a
site asks for covers the uneven batches' choices."""

import sys

import kiln
from paged_args import paged_args

package = kiln.Package(sys.argv[1])
site = package.site("attention_0")  # GQA 32/8, head dim 128, pages of 16


def args(batch, max_pages, **change):
    return paged_args(batch, max_pages, workspace=0x100000,
                      workspace_bytes=1 << 40, **change)


for batch, keys in ((16, 16384), (15, 16384), (8, 1024), (4, 15840),
                    (1, 32768)):
    print(f"{batch * 8} blocks, {keys} keys: {site.splits(args(batch, keys // 16))} splits")

# A batch of 32 sequences of at most 15881 keys, 8816 on average (the ragged
# batch of bench_decode.py): 256 blocks, unsplit without the total.
for total in (0, 32 * 8816, 32 * 15888):
    print(f"256 blocks, 15881 keys, total {total}: "
          f"{site.splits(args(32, 993, total_kv_len=total))} splits")
print(f"8 blocks, 32768 keys, total 32768: "
      f"{site.splits(args(1, 2048, total_kv_len=32768))} splits")
# The workspace for at most 32 sequences of 15888 keys holds the uneven
# batch's splits: a launch given just that workspace keeps its choice.
need = site.workspace_size(32, 1, 993 * 16)
print(f"workspace {need} bytes: "
      f"{site.splits(paged_args(32, 993, workspace=0x100000, workspace_bytes=need, total_kv_len=32 * 8816))} splits")
