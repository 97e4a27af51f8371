"""The split counts the runtime chooses for paged launches of a package
(package-paged.test), against a stand-in driver that answers 132 SMs and two
resident blocks an SM: a grid with a block on all but a sixteenth of the SMs
runs unsplit, smaller grids split to two blocks an SM."""

import sys

import kiln
from paged_args import paged_args

package = kiln.Package(sys.argv[1])
site = package.site("attention_0")  # GQA 32/8, head dim 128, pages of 16


def args(batch, max_pages):
    return paged_args(batch, max_pages, workspace=0x100000,
                      workspace_bytes=1 << 40)


for batch, keys in ((16, 16384), (15, 16384), (8, 1024), (4, 15840),
                    (1, 32768)):
    print(f"{batch * 8} blocks, {keys} keys: {site.splits(args(batch, keys // 16))} splits")
