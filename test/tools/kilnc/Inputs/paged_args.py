"""Raw paged-attention launch arguments for the attention_0 site of
test/gpu/paged_sites.mlir (GQA 32/8, head dim 128, bf16, pages of 16), for
the scripts of package-paged.test: placeholder pointers, `sequences` sequences
of at most `pages_each` pages, caches of exactly their pages; `change` sets
fields afterwards."""

from kiln.runtime import DType, PagedAttentionArgs


def paged_args(sequences=8, pages_each=128, **change):
    a = PagedAttentionArgs()
    for name in ("q", "key_cache", "value_cache", "out", "page_table",
                 "kv_lens"):
        setattr(a, name, 0x1000)
    for name in ("q", "key_cache", "value_cache", "out"):
        setattr(a, name + "_dtype", int(DType.BF16))
    a.batch, a.q_heads, a.kv_heads, a.q_len = sequences, 32, 8, 1
    a.head_dim, a.page_size, a.max_pages = 128, 16, pages_each
    a.num_pages = sequences * pages_each
    a.q_strides[:] = [32 * 128, 128, 128, 1]
    a.out_strides[:] = [32 * 128, 128, 128, 1]
    a.key_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.value_cache_strides[:] = [16 * 8 * 128, 8 * 128, 128, 1]
    a.page_table_strides[:] = [pages_each, 1]
    for name, value in change.items():
        if isinstance(value, list):
            getattr(a, name)[:] = value
        else:
            setattr(a, name, value)
    return a
