"""Raw launch and append arguments for the sites of fp8_paged_sites.mlir
(package-fp8.test): placeholder pointers (scales at 0x20000 and 0x20100
where the site takes them), two sequences of at most 10 pages in a pool of
20, contiguous caches; `change` sets fields afterwards."""

from kiln.runtime import DType, PagedAppendArgs, PagedAttentionArgs

# attention_0: bf16 queries, e4m3 caches [pages, 16, 8, 128], scales per KV
# head; attention_1: f16 queries, [pages, 32, 2, 64], one scale;
# attention_2: attention_0 over bf16 caches.
SHAPES = {
    "attention_0": (DType.BF16, DType.F8E4M3, 32, 8, 128, 16, 8),
    "attention_1": (DType.F16, DType.F8E4M3, 8, 2, 64, 32, 1),
    "attention_2": (DType.BF16, DType.BF16, 32, 8, 128, 16, 0),
}


def fill(a, change):
    for name, value in change.items():
        if isinstance(value, list):
            getattr(a, name)[:] = value
        else:
            setattr(a, name, value)
    return a


def paged(name, **change):
    dtype, cache, q_heads, kv_heads, dim, page, scales = SHAPES[name]
    a = PagedAttentionArgs()
    for field in ("q", "key_cache", "value_cache", "out", "page_table",
                  "kv_lens"):
        setattr(a, field, 0x10000)
    a.q_dtype = a.out_dtype = int(dtype)
    a.key_cache_dtype = a.value_cache_dtype = int(cache)
    a.batch, a.q_heads, a.kv_heads, a.q_len = 2, q_heads, kv_heads, 1
    a.head_dim, a.page_size, a.max_pages, a.num_pages = dim, page, 10, 20
    a.q_strides[:] = [q_heads * dim, dim, dim, 1]
    a.out_strides[:] = [q_heads * dim, dim, dim, 1]
    a.key_cache_strides[:] = [page * kv_heads * dim, kv_heads * dim, dim, 1]
    a.value_cache_strides[:] = [page * kv_heads * dim, kv_heads * dim, dim, 1]
    a.page_table_strides[:] = [10, 1]
    if scales:
        a.k_scale, a.v_scale, a.num_kv_scales = 0x20000, 0x20100, scales
    return fill(a, change)


def append(name, **change):
    dtype, cache, _, kv_heads, dim, page, scales = SHAPES[name]
    a = PagedAppendArgs()
    for field in ("key", "value", "key_cache", "value_cache", "page_table",
                  "kv_lens", "new_offsets"):
        setattr(a, field, 0x10000)
    a.key_dtype = a.value_dtype = int(dtype)
    a.key_cache_dtype = a.value_cache_dtype = int(cache)
    a.batch, a.kv_heads, a.total_new = 2, kv_heads, 5
    a.head_dim, a.page_size, a.max_pages, a.num_pages = dim, page, 10, 20
    a.key_strides[:] = [kv_heads * dim, dim, 1]
    a.value_strides[:] = [kv_heads * dim, dim, 1]
    a.key_cache_strides[:] = [page * kv_heads * dim, kv_heads * dim, dim, 1]
    a.value_cache_strides[:] = [page * kv_heads * dim, kv_heads * dim, dim, 1]
    a.page_table_strides[:] = [10, 1]
    if scales:
        a.k_scale, a.v_scale, a.num_kv_scales = 0x20000, 0x20100, scales
    return fill(a, change)
