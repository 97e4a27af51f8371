"""kiln.transformers' site cache without a GPU or torch: the generated
sources compile with kilnc, packages land under $KILN_CACHE/<version>/, and a
second lookup loads them without compiling; paged sites carry their sliding
window in their spec, label and digest. With torch (on the CPU, transformers
or a stand-in for its two cache base classes): PagedKVCache's bookkeeping
for left-padded batches and sliding windows against a reference of the
paged kernel's semantics, and the masks it refuses."""

import sys
import types
from pathlib import Path

import pytest

import kiln
import kiln.paged_cache as kp
import kiln.transformers as kt
from kiln.site import SiteSpec, package_source

CAUSAL = SiteSpec.dense("bf16", 64, 64, 0.125, causal=True)
MASK = SiteSpec.dense("bf16", 64, 64, 0.125, mask=True)
NONE = SiteSpec.dense("bf16", 64, 64, 0.125)


def paged16(window=None):
    return SiteSpec.paged("bf16", 64, 64, 0.125, 16, window=window)


def test_sites_compile_into_the_versioned_cache(cache: Path) -> None:
    kt.precompile(dtypes=("bf16",), head_dims=(64,), page_sizes=(16,))
    names = sorted(p.name.rsplit("_", 1)[0] for p in cache.iterdir() if p.is_dir())
    assert names == ["bf16_d64_causal", "bf16_d64_mask", "bf16_d64_none",
                     "bf16_d64_paged16"]
    causal = kt.site_for(CAUSAL)
    assert causal.causal and causal.mask == "none"
    assert causal.q_heads is None and causal.kv_heads is None  # dynamic
    mask = kt.site_for(MASK)
    assert mask.mask == "boolean" and not mask.causal
    paged = kt.site_for(paged16())
    assert paged.paged and paged.page_size == 16 and paged.causal


def test_softcap_and_window_are_kiln_attributes(cache: Path) -> None:
    """Gemma 2's soft-cap and a sliding window run on Kiln's own attributes,
    not on a fallback or a mask; the sites without them keep their text."""
    site = kt.site_for(SiteSpec.dense("bf16", 64, 64, 0.125, causal=True,
                                      window=512, softcap=50.0))
    assert site.causal and site.window == 512 and site.softcap == 50.0
    assert site.mask == "none"
    site = kt.site_for(SiteSpec.dense("bf16", 64, 64, 0.125, mask=True,
                                      softcap=30.0))
    assert site.mask == "boolean" and site.softcap == 30.0 and not site.window
    assert "window" not in package_source(CAUSAL)
    assert "softcap" not in package_source(CAUSAL)
    with pytest.raises(kiln.KilnError, match="needs causal"):
        SiteSpec.dense("bf16", 64, 64, 0.125, mask=True, window=512)


def test_a_cached_package_loads_without_kilnc(cache: Path, monkeypatch) -> None:
    kt.site_for(SiteSpec.dense("f16", 128, 128, 128 ** -0.5))
    kt._sites.clear(); kt._packages_by_digest.clear()
    monkeypatch.setenv("KILN_KILNC", "/nonexistent/kilnc")  # would fail
    site = kt.site_for(SiteSpec.dense("f16", 128, 128, 128 ** -0.5))
    assert site.dtype == "f16" and site.head_dim == 128


def test_a_package_from_another_kilnc_is_rebuilt(cache: Path) -> None:
    kt.site_for(NONE)
    [directory] = [p for p in cache.iterdir() if p.is_dir()]
    stamp = directory / "kilnc.stamp"
    assert stamp.read_text() == kt._compiler_stamp()
    # Same kilnc: loaded from the cache, not compiled again.
    manifest = directory / "manifest.json"
    manifest.write_text(manifest.read_text())
    before = manifest.stat().st_mtime_ns
    kt._sites.clear(); kt._packages_by_digest.clear()
    kt.site_for(NONE)
    assert manifest.stat().st_mtime_ns == before
    # Built by another kilnc (or before stamps): compiled again.
    stamp.write_text("/elsewhere/kilnc 1 1")
    kt._sites.clear(); kt._packages_by_digest.clear()
    site = kt.site_for(NONE)
    assert stamp.read_text() == kt._compiler_stamp()
    assert manifest.stat().st_mtime_ns != before
    assert site.dtype == "bf16" and site.head_dim == 64


def test_paged_sites_carry_their_window(cache: Path) -> None:
    kt.precompile(dtypes=("bf16",), head_dims=(64,), page_sizes=(16,),
                  windows=(32,))
    names = sorted(p.name.rsplit("_", 1)[0] for p in cache.iterdir() if p.is_dir())
    assert "bf16_d64_paged16" in names and "bf16_d64_paged16_window32" in names
    plain = kt.site_for(paged16())
    windowed = kt.site_for(paged16(32))
    assert plain.window is None
    assert windowed.window == 32 and windowed.causal and windowed.page_size == 16
    assert paged16(32) in kt._sites
    # The window is in the source, hence in the digest; without one the
    # source is the one packages compiled before windows were cached.
    assert "window = 32 : i64" in package_source(paged16(32))
    assert "window" not in package_source(paged16())


def test_processes_compiling_one_site_share_the_cache(cache: Path) -> None:
    """Four processes ask for the same uncached site at once: one compiles
    it (the others wait for its lock), every one opens the whole package,
    and nothing half-written or temporary is left in the cache."""
    import subprocess

    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import kiln.transformers as kt;"
        "from kiln.site import SiteSpec;"
        "site = kt.site_for(SiteSpec.dense('bf16', 64, 64, 0.125, causal=True));"
        "assert site.causal and site.head_dim == 64, site;"
        "print(len(site.package.kernels))"
    )
    python_dir = str(Path(kiln.__file__).resolve().parent.parent)
    workers = [
        subprocess.Popen([sys.executable, "-c", script, python_dir],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(4)
    ]
    results = [worker.communicate(timeout=300) for worker in workers]
    for worker, (out, err) in zip(workers, results):
        assert worker.returncode == 0, err
    assert len({out for out, _ in results}) == 1  # the same package
    entries = sorted(p.name for p in cache.iterdir())
    directories = [name for name in entries if (cache / name).is_dir()]
    assert len(directories) == 1 and directories[0].startswith("bf16_d64_causal_")
    assert entries == sorted(directories + [directories[0] + ".lock"])
    package = cache / directories[0]
    assert (package / "manifest.json").exists() and (package / "kilnc.stamp").exists()


def test_paged_specs_are_checked(cache: Path) -> None:
    assert paged16().label == "bf16_d64_paged16"
    assert paged16(4096).label == "bf16_d64_paged16_window4096"
    with pytest.raises(kiln.KilnError, match="positive"):
        paged16(0)
    assert not cache.exists()  # nothing was written, nothing compiled


def test_the_sliding_window_comes_from_the_call_then_the_module() -> None:
    class Module:
        sliding_window = 32

    assert kt._sliding_window(Module(), {}) == 32
    assert kt._sliding_window(Module(), {"sliding_window": 8}) == 8
    # Qwen2 and Gemma 3 pass None on their full-attention layers.
    assert kt._sliding_window(Module(), {"sliding_window": None}) is None
    assert kt._sliding_window(object(), {}) is None


# --------------------------------------------------------------------------
# PagedKVCache's bookkeeping on the CPU: the kernel replaced by a reference
# of kiln.paged_attention's semantics, masks built by transformers' rules.
# --------------------------------------------------------------------------


def _stand_in_cache_utils():
    """The two base classes PagedKVCache takes from transformers, reduced to
    what it uses (for machines without transformers)."""

    class CacheLayerMixin:
        def __init__(self):
            self.keys = self.values = None
            self.is_initialized = False

    class Cache:
        def __init__(self, layers):
            self.layers = layers

    module = types.ModuleType("transformers.cache_utils")
    module.Cache, module.CacheLayerMixin = Cache, CacheLayerMixin
    return module


@pytest.fixture
def paged(monkeypatch):
    """PagedKVCache with the kernel replaced by `reference_paged`; yields the
    class and the list of site specs requested."""
    torch = pytest.importorskip("torch")
    try:
        import transformers.cache_utils  # noqa: F401
    except ImportError:
        package = types.ModuleType("transformers")
        package.cache_utils = _stand_in_cache_utils()
        monkeypatch.setitem(sys.modules, "transformers", package)
        monkeypatch.setitem(sys.modules, "transformers.cache_utils",
                            package.cache_utils)
    specs = []

    def site_for(spec):
        specs.append(spec)
        return types.SimpleNamespace(scale=spec.scale, window=spec.window)

    monkeypatch.setattr(kp, "site_for", site_for)
    monkeypatch.setattr(kp.kops, "paged_attention", reference_paged)
    torch.manual_seed(0)
    yield kp.paged_cache_class(), specs


def reference_paged(site, q, key_cache, value_cache, table, kv_lens,
                    total_kv_len=0):
    """kiln.paged_attention {causal, window}: key j of sequence b at
    table[b, j / P], offset j % P; query i sees j <= i + (kv_lens[b] - Sq)
    and, with window W, not j <= i + (kv_lens[b] - Sq) - W; a query that
    sees no key gives zeros. The cache passes the batch's total length,
    which must be the sum of kv_lens."""
    import torch

    assert total_kv_len == int(kv_lens.sum()), (total_kv_len, kv_lens)

    batch, q_heads, queries, _ = q.shape
    page, kv_heads = key_cache.shape[1], key_cache.shape[2]
    out = torch.zeros(batch, q_heads, queries, value_cache.shape[3])
    for b in range(batch):
        count = int(kv_lens[b])
        j = torch.arange(count)
        pages = table[b, j // page].long()
        k = key_cache[pages, j % page].transpose(0, 1)  # [Hkv, n, D]
        v = value_cache[pages, j % page].transpose(0, 1)
        k = k.repeat_interleave(q_heads // kv_heads, 0)
        v = v.repeat_interleave(q_heads // kv_heads, 0)
        scores = site.scale * q[b] @ k.transpose(-1, -2)
        diagonal = torch.arange(queries)[:, None] + (count - queries)
        hidden = j[None] > diagonal
        if site.window:
            hidden |= j[None] <= diagonal - site.window
        scores = scores.masked_fill(hidden, float("-inf"))
        weights = torch.softmax(scores, -1).nan_to_num(0.0)
        out[b] = weights @ v
    return out


def hf_mask(padding, start, new, window=None):
    """The SDPA-format mask transformers builds for positions [start,
    start + new) over keys [0, start + new): the key is not a pad, not ahead
    of the query, and (sliding window) q - k < window."""
    import torch

    q = start + torch.arange(new)[:, None]
    k = torch.arange(start + new)[None]
    visible = k <= q
    if window:
        visible &= q - k < window
    return (visible[None] & padding[:, None, : start + new].bool())[:, None]


def dense_reference(q, k, v, mask, scale):
    """Attention of q [B, H, new, D] over every position's k, v (pads
    included) [B, Hkv, S, D] under transformers' mask: [B, new, H, D]."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = scale * q @ k.transpose(-1, -2)
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1).nan_to_num(0.0) @ v).transpose(1, 2)


def run_steps(cache, windows, pads, chunks, decode, scale=0.3):
    """Feeds a left-padded batch through every layer of `cache` (layer l
    with sliding window windows[l]): the prompt in `chunks`, then `decode`
    single tokens; checks each real query's output against the dense
    reference. Returns the worst pad-query magnitude (must be finite)."""
    import torch

    batch, total = len(pads), sum(chunks) + decode
    padding = torch.ones(batch, total, dtype=torch.long)
    for row, count in enumerate(pads):
        padding[row, :count] = 0
    layers = [(torch.randn(batch, 4, total, 8), torch.randn(batch, 2, total, 8),
               torch.randn(batch, 2, total, 8)) for _ in windows]
    start, worst_pad = 0, 0.0
    for new in list(chunks) + [1] * decode:
        for layer, window, (q, k, v) in zip(cache.layers, windows, layers):
            mask = hf_mask(padding, start, new, window)
            end = start + new
            layer.update(k[:, :, start:end], v[:, :, start:end])
            out = layer.attend(q[:, :, start:end], scale, mask, window)
            expected = dense_reference(q[:, :, start:end], k[:, :, :end],
                                       v[:, :, :end], mask, scale)
            real = padding[:, start:end].bool()
            assert torch.allclose(out[real], expected[real], atol=1e-5), (start, new)
            if (~real).any():
                worst_pad = max(worst_pad, float(out[~real].abs().max()))
        start += new
    return worst_pad


@pytest.mark.parametrize("windows", [(None,), (3,), (3, None)])
def test_left_padded_batches_are_stored_compacted(paged, windows) -> None:
    import torch

    PagedKVCache, specs = paged
    cache = PagedKVCache(batch_size=3, max_length=16, num_layers=len(windows),
                         page_size=4, device="cpu")
    pads = (0, 3, 6)
    worst_pad = run_steps(cache, windows, pads, chunks=(10,), decode=6)
    assert worst_pad == 0.0  # pad queries see no key
    assert cache.pad_counts == [0, 3, 6]
    assert cache.sequence_lengths().tolist() == [16, 13, 10]
    assert cache.layers[0].get_seq_length() == 16  # pads counted, as HF does
    assert {(s.page_size, s.window, s.ragged) for s in specs} == {
        (4, w, False) for w in windows}


def test_pads_may_span_prefill_chunks(paged) -> None:
    PagedKVCache, _ = paged
    cache = PagedKVCache(batch_size=2, max_length=12, num_layers=1,
                         page_size=2, device="cpu")
    # The second sequence's 6 pads fill the first chunk and part of the next.
    run_steps(cache, (None,), pads=(0, 6), chunks=(4, 6), decode=2)
    assert cache.pad_counts == [0, 6]
    assert cache.sequence_lengths().tolist() == [12, 6]
    cache.layers[0].reset()
    assert cache.pad_counts == [0, 0] and cache.layers[0].get_seq_length() == 0


def test_masks_other_than_left_padding_raise(paged) -> None:
    import torch

    PagedKVCache, _ = paged
    cache = PagedKVCache(batch_size=2, max_length=16, num_layers=1,
                         page_size=4, device="cpu")
    layer = cache.layers[0]
    padding = torch.ones(2, 16, dtype=torch.long)
    padding[1, :2] = 0
    q, k = torch.randn(2, 4, 16, 8), torch.randn(2, 2, 16, 8)

    def attempt(mask, start=0, new=8, window=None):
        if start == 0:
            cache.forget_pads()
        layer.length, layer.pending = start, None
        layer.update(k[:, :, start:start + new], k[:, :, start:start + new])
        return layer.attend(q[:, :, start:start + new], 0.3, mask, window)

    # A key hidden from one real query only (not a pad, not causal).
    custom = hf_mask(padding, 0, 8).clone()
    custom[0, 0, 6, 3] = False
    with pytest.raises(kiln.KilnError, match="not left padding"):
        attempt(custom)
    # A real token in the middle hidden from everyone, itself included.
    holes = padding.clone()
    holes[0, 4] = 0
    with pytest.raises(kiln.KilnError, match="left-padded"):
        attempt(hf_mask(holes, 0, 8))
    # A window in the mask that the layer does not have, and the reverse.
    with pytest.raises(kiln.KilnError, match="not left padding"):
        attempt(hf_mask(padding, 0, 8, window=3))
    with pytest.raises(kiln.KilnError, match="sliding window of 3"):
        attempt(hf_mask(padding, 0, 8), window=3)
    # No mask on a windowed layer is causal with the window (what Kiln's
    # mask function leaves out after checking it): accepted.
    cache.forget_pads()
    assert cache._check(0, 8, None, 3) is None
    with pytest.raises(kiln.KilnError, match="needs \\[2, 1, 8, 8\\]"):
        attempt(hf_mask(padding, 0, 9)[:, :, :8])
    # After a padded prefill every step needs its mask.
    attempt(hf_mask(padding, 0, 8))
    assert cache.pad_counts == [0, 2]
    with pytest.raises(kiln.KilnError, match="no attention mask"):
        attempt(None, start=8, new=1)


def test_paged_cache_is_exported_at_top_level(paged, monkeypatch):
    import kiln

    # Built on first use from transformers (or the stand-in); not kept, so
    # that other tests build their own.
    monkeypatch.delitem(kt.__dict__, "PagedKVCache", raising=False)
    cls = kiln.PagedKVCache
    assert cls is kt.PagedKVCache
    assert cls.__name__ == "PagedKVCache"
    monkeypatch.delitem(kt.__dict__, "PagedKVCache", raising=False)
    with pytest.raises(AttributeError):
        kiln.NoSuchThing  # noqa: B018
