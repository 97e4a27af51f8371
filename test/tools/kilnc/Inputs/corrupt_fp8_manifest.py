"""Opens copies of the FP8 package of fp8_paged_sites.mlir whose manifests
are corrupted (package-fp8.test): each is refused with a message naming the
place; and a copy without the FP8 keys (as written before FP8 caches) opens
with float caches."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import kiln

source = Path(sys.argv[1])
manifest = json.loads((source / "manifest.json").read_text())


def kernel_of(m, site):
    name = m["sites"][site]["kernel"]
    return next(k for k in m["kernels"] if k["name"] == name)


def append_of(m, site):
    name = kernel_of(m, site)["paged_append"]
    return next(k for k in m["kernels"] if k["name"] == name)


def arg(kernel, name):
    return next(a for a in kernel["args"] if a["name"] == name)


def mutate(name, change, show=None):
    m = json.loads(json.dumps(manifest))
    change(m)
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "pkg"
        shutil.copytree(source, target)
        (target / "manifest.json").write_text(json.dumps(m))
        try:
            package = kiln.Package(str(target))
            print(name, "-> opened", show(package) if show else "")
        except kiln.KilnError as error:
            print(name, "->", str(error).replace(str(target), "PKG"))


# Sites: attention_0 FP8 per KV head, attention_1 FP8 per tensor,
# attention_2 bf16.
mutate("fp8 without scales",
       lambda m: m["sites"][0].__setitem__("kv_scales", None))
mutate("fp8 scales missing", lambda m: m["sites"][1].pop("kv_scales"))
mutate("unknown scales",
       lambda m: m["sites"][0].__setitem__("kv_scales", "per_channel"))
mutate("float cache with scales",
       lambda m: m["sites"][2].__setitem__("kv_scales", "per_tensor"))
mutate("unknown cache dtype",
       lambda m: m["sites"][0].__setitem__("cache_dtype", "f8e5m2"))
mutate("float cache of another dtype",
       lambda m: m["sites"][2].__setitem__("cache_dtype", "f16"))
mutate("fp8 cache of f32 queries",
       lambda m: m["sites"][2].update(cache_dtype="f8e4m3", dtype="f32"))
mutate("site and kernel disagree",
       lambda m: m["sites"][0].update(cache_dtype="bf16", kv_scales=None))
# Kernels.
mutate("fp8 kernel without k_scale",
       lambda m: kernel_of(m, 0)["args"].remove(arg(kernel_of(m, 0),
                                                    "k_scale")))
mutate("float kernel with k_scale",
       lambda m: kernel_of(m, 2)["args"].append(
           {"name": "k_scale", "kind": "pointer", "dtype": "f32"}))
mutate("scale of another kind",
       lambda m: arg(kernel_of(m, 1), "v_scale").__setitem__("kind", "i64"))
mutate("scale of another dtype",
       lambda m: arg(kernel_of(m, 1), "v_scale").__setitem__("dtype", "f16"))
mutate("cache argument of another dtype",
       lambda m: arg(kernel_of(m, 0), "key_cache").__setitem__("dtype",
                                                               "bf16"))
mutate("fp8 kernel with a float append kernel",
       lambda m: kernel_of(m, 0).__setitem__(
           "paged_append", kernel_of(m, 2)["paged_append"]))
mutate("fp8 append kernel without v_scale",
       lambda m: append_of(m, 1)["args"].remove(arg(append_of(m, 1),
                                                    "v_scale")))
mutate("append cache argument of another dtype",
       lambda m: arg(append_of(m, 1), "value_cache").__setitem__("dtype",
                                                                 "f16"))
mutate("fp8 combine kernel",
       lambda m: next(k for k in m["kernels"] if k["kind"] ==
                      "split_combine").__setitem__("cache_dtype", "f8e4m3"))


def before_fp8(m):
    """The bf16 site and its kernels as written before FP8 caches."""
    del m["sites"][:2]
    for key in ("cache_dtype", "kv_scales"):
        m["sites"][0].pop(key)
    for kernel in (kernel_of(m, 0), append_of(m, 0)):
        kernel.pop("cache_dtype")
    append = append_of(m, 0)
    append["args"] = [a for a in append["args"]
                      if a["name"] not in ("k_scale", "v_scale")]


mutate("written before fp8 caches", before_fp8,
       lambda p: [(s.name, s.cache_dtype, s.kv_scales) for s in p.sites])
