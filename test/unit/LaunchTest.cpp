//===- LaunchTest.cpp - Launches through a stand-in CUDA driver -----------===//
//
// libkilnrt is pointed at libkiln_fake_cuda.so (KILN_CUDA_DRIVER_LIB, set by
// this binary's main), which records module loads and launches: these tests
// check PTX selection, JIT error reporting, per-context module caching, the
// dynamic shared memory attribute and the kernel parameters marshalled by
// name, all without a GPU.
//
//===----------------------------------------------------------------------===//

#include "FakeCudaDriver.h"
#include "PackageFixture.h"

#include <cstring>
#include <algorithm>
#include <dlfcn.h>
#include <map>

using namespace kiln::test;
using ::testing::HasSubstr;

namespace {

FakeCudaState &fake() {
  static FakeCudaState *state = [] {
    void *library = ::dlopen(std::getenv("KILN_CUDA_DRIVER_LIB"), RTLD_NOW);
    EXPECT_NE(library, nullptr) << ::dlerror();
    auto get = reinterpret_cast<FakeCudaState *(*)()>(
        ::dlsym(library, "fakeCudaState"));
    return get();
  }();
  return *state;
}

class LaunchTest : public PackageTest {
protected:
  void SetUp() override {
    PackageTest::SetUp();
    fake() = FakeCudaState();
  }

  /// Writes a package whose PTX files name their target and the kernels.
  void writeNamedPtx(const json &manifest) {
    writePackage(manifest);
    for (const json &target : manifest["targets"]) {
      std::string text = "// " + target["chip"].get<std::string>() + "\n";
      for (const json &kernel : manifest["kernels"])
        text += ".entry " + kernel["name"].get<std::string>() + "\n";
      writeFile(target["ptx"].get<std::string>(), text);
    }
  }

  /// Writes a package whose PTX reads as kilnc writes it: the module's
  /// directives and a shared declaration, then an entry for each kernel of
  /// the target (a brace in a comment of its body).
  void writeEntryPtx(const json &manifest) {
    writePackage(manifest);
    for (const json &target : manifest["targets"]) {
      std::string chip = target["chip"].get<std::string>();
      std::string text = "//\n// Generated\n//\n\n.version 8.0\n.target " +
                         chip +
                         "\n.address_size 64\n\n.extern .shared .align 16 "
                         ".b8 kiln_dynamic_shared[];\n";
      for (const json &kernel : manifest["kernels"]) {
        if (kernel.contains("targets") &&
            std::find(kernel["targets"].begin(), kernel["targets"].end(),
                      chip) == kernel["targets"].end())
          continue;
        std::string name = kernel["name"].get<std::string>();
        text += "\t// .globl\t" + name + "\n.visible .entry " + name +
                "(\n\t.param .u64 q\n)\n.reqntid 128, 1, 1\n{\n\tret; /* } "
                "*/\n}\n";
      }
      writeFile(target["ptx"].get<std::string>(), text);
    }
  }

  /// Writes `manifest` with named PTX, opens it and returns site `name`.
  const kiln_site *openNamedSite(const json &manifest, const char *name) {
    writeNamedPtx(manifest);
    EXPECT_EQ(open(), KILN_OK) << kiln_last_error();
    const kiln_site *site = nullptr;
    EXPECT_EQ(kiln_package_find_site(package, name, &site), KILN_OK);
    return site;
  }

  kiln_attention_args args(const kiln_site *site, int64_t batch,
                           int64_t qHeads, int64_t kvHeads, int64_t qLen,
                           int64_t kvLen) {
    kiln_site_info info;
    EXPECT_EQ(kiln_site_get_info(site, &info), KILN_OK);
    kiln_attention_args a;
    kiln_attention_args_init(&a);
    a.q = reinterpret_cast<void *>(0x10000);
    a.k = reinterpret_cast<void *>(0x20000);
    a.v = reinterpret_cast<void *>(0x30000);
    a.out = reinterpret_cast<void *>(0x40000);
    a.q_dtype = a.k_dtype = a.v_dtype = a.out_dtype = info.dtype;
    if (info.mask != KILN_MASK_NONE) {
      a.mask = reinterpret_cast<void *>(0x50000);
      a.mask_dtype = info.mask_dtype;
    }
    a.batch = batch;
    a.q_heads = qHeads;
    a.kv_heads = kvHeads;
    a.q_len = qLen;
    a.kv_len = kvLen;
    a.head_dim = info.head_dim;
    EXPECT_EQ(kiln_attention_args_set_contiguous(site, &a), KILN_OK);
    return a;
  }
};

int32_t asI32(uint64_t slot) {
  int32_t value;
  std::memcpy(&value, &slot, 4);
  return value;
}

float asF32(uint64_t slot) {
  float value;
  std::memcpy(&value, &slot, 4);
  return value;
}

TEST_F(LaunchTest, MarshalsParametersByName) {
  json manifest = validManifest();
  writeNamedPtx(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_1", &site), KILN_OK);
  kiln_attention_args a = args(site, 3, 4, 2, 100, 130);
  a.mask_strides[1] = 0; // broadcast over heads
  fake().expectedParams = 27;
  void *stream = reinterpret_cast<void *>(0xabc);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, stream), KILN_OK)
      << kiln_last_error();

  const FakeLaunch &launch = fake().lastLaunch;
  EXPECT_EQ(fake().launches, 1);
  EXPECT_EQ(launch.grid[0], 7u); // ceil(100 / 16)
  EXPECT_EQ(launch.grid[1], 4u);
  EXPECT_EQ(launch.grid[2], 3u);
  EXPECT_EQ(launch.block[0], 128u);
  EXPECT_EQ(launch.sharedBytes, 0u);
  EXPECT_EQ(launch.stream, stream);
  EXPECT_FALSE(launch.hasExtra);

  const json &kernelArgs = manifest["kernels"][1]["args"];
  ASSERT_EQ(kernelArgs.size(), 27u);
  std::map<std::string, uint64_t> byName;
  for (size_t i = 0; i < kernelArgs.size(); ++i)
    byName[kernelArgs[i]["name"].get<std::string>()] = launch.params[i];
  EXPECT_EQ(byName["q"], 0x10000u);
  EXPECT_EQ(byName["k"], 0x20000u);
  EXPECT_EQ(byName["v"], 0x30000u);
  EXPECT_EQ(byName["out"], 0x40000u);
  EXPECT_EQ(byName["mask"], 0x50000u);
  EXPECT_EQ(asI32(byName["batch"]), 3);
  EXPECT_EQ(asI32(byName["q_heads"]), 4);
  EXPECT_EQ(asI32(byName["kv_heads"]), 2);
  EXPECT_EQ(asI32(byName["q_len"]), 100);
  EXPECT_EQ(asI32(byName["kv_len"]), 130);
  EXPECT_FLOAT_EQ(asF32(byName["scale"]), 0.125f);
  EXPECT_EQ(static_cast<int64_t>(byName["q_stride_batch"]), 4 * 100 * 128);
  EXPECT_EQ(static_cast<int64_t>(byName["q_stride_head"]), 100 * 128);
  EXPECT_EQ(static_cast<int64_t>(byName["q_stride_seq"]), 128);
  EXPECT_EQ(static_cast<int64_t>(byName["k_stride_batch"]), 2 * 130 * 128);
  EXPECT_EQ(static_cast<int64_t>(byName["v_stride_head"]), 130 * 128);
  EXPECT_EQ(static_cast<int64_t>(byName["out_stride_seq"]), 128);
  EXPECT_EQ(static_cast<int64_t>(byName["mask_stride_batch"]), 4 * 100 * 130);
  EXPECT_EQ(static_cast<int64_t>(byName["mask_stride_head"]), 0);
  EXPECT_EQ(static_cast<int64_t>(byName["mask_stride_q"]), 130);
  EXPECT_EQ(static_cast<int64_t>(byName["mask_stride_k"]), 1);
}

TEST_F(LaunchTest, BatchOverTheGridRunsAsConsecutiveLaunches) {
  json manifest = validManifest();
  const kiln_site *site = openNamedSite(manifest, "attention_1");
  ASSERT_NE(site, nullptr);
  // grid.z = batch: 70,000 sequences are launched as 65,535 and 4,465.
  kiln_attention_args a = args(site, 70000, 1, 1, 4, 4);
  fake().expectedParams = 27;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(fake().launches, 2);
  const json &kernelArgs = manifest["kernels"][1]["args"];
  auto byName = [&](const FakeLaunch &launch) {
    std::map<std::string, uint64_t> values;
    for (size_t i = 0; i < kernelArgs.size(); ++i)
      values[kernelArgs[i]["name"].get<std::string>()] = launch.params[i];
    return values;
  };
  auto first = byName(fake().previousLaunch);
  auto second = byName(fake().lastLaunch);
  EXPECT_EQ(fake().previousLaunch.grid[2], 65535u);
  EXPECT_EQ(fake().lastLaunch.grid[2], 4465u);
  EXPECT_EQ(asI32(first["batch"]), 65535);
  EXPECT_EQ(asI32(second["batch"]), 4465);
  EXPECT_EQ(first["q"], 0x10000u);
  // The second part starts at sequence 65535 of every per-sequence tensor
  // (f16: 2 bytes an element).
  uint64_t qStride = first["q_stride_batch"];
  EXPECT_EQ(second["q"], 0x10000u + 65535u * qStride * 2);
  EXPECT_EQ(second["k"], 0x20000u + 65535u * first["k_stride_batch"] * 2);
  EXPECT_EQ(second["v"], 0x30000u + 65535u * first["v_stride_batch"] * 2);
  EXPECT_EQ(second["out"], 0x40000u + 65535u * first["out_stride_batch"] * 2);
  EXPECT_EQ(second["mask"],
            0x50000u + 65535u * first["mask_stride_batch"] * 4); // f32 mask
}

TEST_F(LaunchTest, ArgumentOrderComesFromTheManifest) {
  json manifest = validManifest();
  json &kernelArgs = manifest["kernels"][0]["args"];
  // Reverse the ABI: the runtime must follow the names.
  std::reverse(kernelArgs.begin(), kernelArgs.end());
  writeNamedPtx(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args a = args(site, 2, 8, 2, 16, 16);
  fake().expectedParams = static_cast<int>(kernelArgs.size());
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  const FakeLaunch &launch = fake().lastLaunch;
  size_t last = kernelArgs.size() - 1;
  EXPECT_EQ(launch.params[last], 0x10000u); // q, now last
  EXPECT_EQ(static_cast<int64_t>(launch.params[0]), 64); // out_stride_seq
}

TEST_F(LaunchTest, LoadsTheDevicesPtxOncePerContext) {
  writeNamedPtx(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args a = args(site, 1, 8, 2, 16, 16);

  fake().major = 8;
  fake().minor = 6;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_THAT(fake().loadedPtx, HasSubstr("// sm_80"));
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_EQ(fake().moduleLoads, 1);

  // Another context (on a 9.0 device) loads its own module.
  fake().currentContext = 2;
  fake().major = 9;
  fake().minor = 0;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_EQ(fake().moduleLoads, 2);
  EXPECT_THAT(fake().loadedPtx, HasSubstr("// sm_90a"));
  EXPECT_EQ(fake().launches, 3);

  kiln_package_close(package);
  package = nullptr;
  EXPECT_EQ(fake().moduleUnloads, 2);
}

TEST_F(LaunchTest, CompilesEachKernelsModuleWhenFirstNeeded) {
  // PTX laid out as kilnc writes it: declarations, then one entry a kernel.
  writeEntryPtx(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args a = args(site, 1, 8, 2, 16, 16);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  // Only the launched kernel's module is compiled, with the declarations.
  EXPECT_EQ(fake().moduleLoads, 1);
  EXPECT_THAT(fake().loadedPtx,
              HasSubstr(".visible .entry kiln_attention_bf16_d64_causal("));
  EXPECT_THAT(fake().loadedPtx, HasSubstr("kiln_dynamic_shared[];"));
  EXPECT_THAT(fake().loadedPtx, HasSubstr(".target sm_90a"));
  EXPECT_EQ(fake().loadedPtx.find("kiln_attention_f16_d128_mask"),
            std::string::npos);
  // Preparing compiles the rest; a second launch compiles nothing.
  ASSERT_EQ(kiln_package_prepare(package), KILN_OK) << kiln_last_error();
  EXPECT_EQ(fake().moduleLoads, 2);
  EXPECT_THAT(fake().modulePtx[1],
              HasSubstr(".visible .entry kiln_attention_f16_d128_mask("));
  ASSERT_EQ(kiln_package_prepare(package), KILN_OK);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_EQ(fake().moduleLoads, 2);
  kiln_package_close(package);
  package = nullptr;
  EXPECT_EQ(fake().moduleUnloads, 2);
}

TEST_F(LaunchTest, PreparesASitesKernelOrEveryModule) {
  // Four kernels (the warp-specialised one sm_90a only): prepare compiles
  // each in its own module, once.
  json manifest = warpSpecializedManifest();
  manifest["kernels"].push_back(attentionKernel(
      "kiln_attention_f16_d64", "f16", 64, false));
  writeEntryPtx(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  // A site prepares only the kernel its prefill launches take on sm_90a.
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  ASSERT_EQ(kiln_site_prepare(site), KILN_OK) << kiln_last_error();
  EXPECT_EQ(fake().moduleLoads, 1);
  EXPECT_THAT(fake().loadedPtx,
              HasSubstr(".entry kiln_attention_ws_bf16_d64_causal("));
  ASSERT_EQ(kiln_package_prepare(package), KILN_OK) << kiln_last_error();
  EXPECT_EQ(fake().moduleLoads, 4);
  std::vector<std::string> modules = fake().modulePtx;
  std::sort(modules.begin(), modules.end());
  for (size_t i = 0; i < modules.size(); ++i)
    EXPECT_EQ(std::count(modules[i].begin(), modules[i].end(), '{'), 1)
        << modules[i];
  EXPECT_EQ(std::adjacent_find(modules.begin(), modules.end()), modules.end());
  // On an 8.0 device (another context), the site's portable kernel, then
  // the rest of the sm_80 PTX's three.
  fake().currentContext = 2;
  fake().major = 8;
  ASSERT_EQ(kiln_site_prepare(site), KILN_OK) << kiln_last_error();
  EXPECT_EQ(fake().moduleLoads, 5);
  EXPECT_THAT(fake().loadedPtx,
              HasSubstr(".entry kiln_attention_bf16_d64_causal("));
  ASSERT_EQ(kiln_package_prepare(package), KILN_OK) << kiln_last_error();
  EXPECT_EQ(fake().moduleLoads, 7);
}

TEST_F(LaunchTest, UsesTheStreamsContextWhenNoneIsCurrent) {
  writeNamedPtx(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args a = args(site, 1, 8, 2, 16, 16);
  fake().currentContext = 0;
  EXPECT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_CUDA_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("no CUDA context is current"));
  void *stream = reinterpret_cast<void *>(0x5555);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, stream), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(fake().currentContext, 7u);
}

TEST_F(LaunchTest, ReportsTheJitLog) {
  json manifest = validManifest();
  writeNamedPtx(manifest);
  writeFile("kernels.sm_90a.ptx", "INVALID ptx");
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_package_prepare(package), KILN_CUDA_ERROR);
  std::string message = kiln_last_error();
  EXPECT_THAT(message, HasSubstr("cuModuleLoadDataEx failed: "
                                 "CUDA_ERROR_INVALID_PTX"));
  EXPECT_THAT(message, HasSubstr("kernels.sm_90a.ptx (sm_90a)"));
  EXPECT_THAT(message, HasSubstr("ptxas fatal: fake syntax error"));
}

TEST_F(LaunchTest, ReportsAMissingKernelEntry) {
  json manifest = validManifest();
  writeNamedPtx(manifest);
  writeFile("kernels.sm_90a.ptx", "// no entries\n");
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_package_prepare(package), KILN_CUDA_ERROR);
  EXPECT_THAT(kiln_last_error(),
              HasSubstr("cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND"));
  EXPECT_THAT(kiln_last_error(),
              HasSubstr("\"kiln_attention_bf16_d64_causal\""));
}

TEST_F(LaunchTest, RaisesTheDynamicSharedMemoryLimit) {
  json manifest = validManifest();
  manifest["kernels"][0]["dynamic_shared_bytes"] = 100 * 1024;
  writeNamedPtx(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args a = args(site, 1, 8, 2, 16, 16);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(fake().maxDynamicShared, 100 * 1024);
  EXPECT_EQ(fake().lastLaunch.sharedBytes, 100u * 1024u);
}

TEST_F(LaunchTest, RejectsSharedMemoryOverTheDevicesLimit) {
  json manifest = validManifest();
  manifest["kernels"][0]["dynamic_shared_bytes"] = 240 * 1024;
  writeNamedPtx(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kiln_package_prepare(package), KILN_UNSUPPORTED);
  EXPECT_THAT(kiln_last_error(), HasSubstr("bytes of shared memory"));
}

TEST_F(LaunchTest, NoPtxForAnOldDevice) {
  writeNamedPtx(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  fake().major = 7;
  fake().minor = 5;
  EXPECT_EQ(kiln_package_prepare(package), KILN_UNSUPPORTED);
  EXPECT_THAT(kiln_last_error(),
              HasSubstr("no PTX for a device of compute capability 7.5"));
}

} // namespace

namespace {

/// validManifest() with kernel 0 (bf16 d64, causal, used by attention_0)
/// splitting keys, and its combine kernel.
json splitManifest() {
  json manifest = validManifest();
  json &kernel = manifest["kernels"][0];
  kernel["split_combine"] = "kiln_split_combine_bf16_dv64";
  kernel["grid"][2]["times_splits"] = true;
  kernel["args"].push_back({{"name", "num_splits"}, {"kind", "i32"}});
  kernel["args"].push_back({{"name", "workspace"}, {"kind", "pointer"}});
  json args = json::array();
  args.push_back({{"name", "workspace"}, {"kind", "pointer"}});
  args.push_back({{"name", "out"}, {"kind", "pointer"}, {"dtype", "bf16"}});
  for (const char *name : {"num_splits", "batch", "q_heads", "q_len"})
    args.push_back({{"name", name}, {"kind", "i32"}});
  for (const char *axis : {"batch", "head", "seq"})
    args.push_back(
        {{"name", std::string("out_stride_") + axis}, {"kind", "i64"}});
  manifest["kernels"].push_back(
      {{"name", "kiln_split_combine_bf16_dv64"},
       {"kind", "split_combine"},
       {"dtype", "bf16"},
       {"v_head_dim", 64},
       {"block", {128, 1, 1}},
       {"rows_per_block", 4},
       {"kv_block_size", 0},
       {"grid",
        {{{"dim", {"batch", "q_heads", "q_len"}}, {"ceil_div", 4}}, 1, 1}},
       {"static_shared_bytes", 0},
       {"dynamic_shared_bytes", 0},
       {"args", args}});
  return manifest;
}

} // namespace

class SplitLaunchTest : public LaunchTest {
protected:
  /// Opens splitManifest() with `targetFields` set on every target.
  const kiln_site *openSplit(const char *name = "attention_0",
                             const json &targetFields = json::object()) {
    json manifest = splitManifest();
    for (json &target : manifest["targets"])
      for (const auto &[key, value] : targetFields.items())
        target[key] = value;
    writeNamedPtx(manifest);
    EXPECT_EQ(open(), KILN_OK) << kiln_last_error();
    const kiln_site *site = nullptr;
    EXPECT_EQ(kiln_package_find_site(package, name, &site), KILN_OK);
    fake().expectedParams = 24;
    return site;
  }
  /// A decode launch of `batch` sequences of attention_0 (8 query heads
  /// over 2, 4096 keys) with the fixture's workspace.
  kiln_attention_args decodeArgs(const kiln_site *site, int64_t batch = 1) {
    kiln_attention_args a = args(site, batch, 8, 2, 1, 4096);
    a.workspace = workspace;
    a.workspace_bytes = sizeof(workspace);
    return a;
  }
  /// Bytes `splits` splits of a decode launch of attention_0 need.
  static int64_t bytesFor(int64_t splits) {
    return splits * 1 * 8 * 1 * (64 + 2) * 4;
  }
  alignas(16) static inline char workspace[1 << 20];
};

TEST_F(SplitLaunchTest, ChoosesSplitsFromTheDeviceAndCombines) {
  const kiln_site *site = openSplit();
  kiln_site_info info;
  ASSERT_EQ(kiln_site_get_info(site, &info), KILN_OK);
  EXPECT_EQ(info.split_kv, 1);
  kiln_attention_args a = decodeArgs(site);
  // 8 blocks of 64 key blocks on 132 SMs (2 resident each): 16 splits of 4
  // key blocks put one block on each of 128 SMs, which one block of a
  // contiguous kernel saturates; 32 splits would put two blocks on an SM
  // to share its bandwidth for half the keys each, and pay more overheads.
  int64_t splits = 0;
  ASSERT_EQ(kiln_site_attention_splits(site, &a, &splits), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(splits, 16);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(fake().launches, 2);
  const FakeLaunch &attention = fake().previousLaunch;
  EXPECT_EQ(attention.grid[2], 16u); // batch x splits
  EXPECT_EQ(asI32(attention.params[22]), 16);
  EXPECT_EQ(attention.params[23], reinterpret_cast<uintptr_t>(workspace));
  const FakeLaunch &combine = fake().lastLaunch;
  EXPECT_NE(combine.function, attention.function);
  EXPECT_EQ(combine.grid[0], 2u); // ceil(1 * 8 * 1 / 4) rows
  EXPECT_EQ(combine.params[0], reinterpret_cast<uintptr_t>(workspace));
  EXPECT_EQ(combine.params[1], 0x40000u);
  EXPECT_EQ(asI32(combine.params[2]), 16);

  // The size query covers this launch's choice.
  int64_t bytes = 0;
  ASSERT_EQ(kiln_site_workspace_size(site, 1, 8, 2, 1, 4096, &bytes), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(bytes, bytesFor(16));
}

TEST_F(SplitLaunchTest, CombineLaunchesEarlyWherePtxWaits) {
  for (bool waits : {false, true}) {
    const kiln_site *site =
        openSplit("attention_0",
                  waits ? json{{"grid_dependency", true}} : json::object());
    ASSERT_NE(site, nullptr);
    kiln_attention_args a = decodeArgs(site);
    ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
        << kiln_last_error();
    // Only the combine kernel, and only where its PTX waits for the split
    // kernel, goes with programmatic stream serialization.
    EXPECT_FALSE(fake().previousLaunch.programmatic);
    EXPECT_EQ(fake().lastLaunch.programmatic, waits);
    EXPECT_EQ(fake().lastLaunch.grid[0], 2u);
    kiln_package_close(package);
    package = nullptr;
  }
}

TEST_F(SplitLaunchTest, AttentionLaunchesEarlyWherePtxWaits) {
  for (bool waits : {false, true}) {
    json fields = {{"grid_dependency", true}, {"cluster_splits", 16}};
    if (waits)
      fields["attention_grid_dependency"] = true;
    const kiln_site *site = openSplit("attention_0", fields);
    ASSERT_NE(site, nullptr);
    kiln_attention_args a = decodeArgs(site);
    ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
        << kiln_last_error();
    // The attention kernel goes with programmatic stream serialization only
    // where its PTX waits for the grids before it; the combine kernel as
    // before.
    EXPECT_EQ(fake().previousLaunch.programmatic, waits);
    EXPECT_TRUE(fake().lastLaunch.programmatic);
    // In clusters, with both attributes.
    a.num_splits = 3;
    int before = fake().launches;
    ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(fake().launches - before, 1);
    EXPECT_EQ(fake().lastLaunch.clusterZ, 3u);
    EXPECT_EQ(fake().lastLaunch.programmatic, waits);
    kiln_package_close(package);
    package = nullptr;
  }
}

TEST_F(SplitLaunchTest, FewSplitsReduceThemselvesInClusters) {
  for (bool clusters : {false, true}) {
    json fields = clusters ? json{{"cluster_splits", 16}} : json::object();
    const kiln_site *site = openSplit("attention_0", fields);
    ASSERT_NE(site, nullptr);
    kiln_attention_args a = decodeArgs(site, 2);
    // Three splits: in clusters of three along z (load-balanced), and no
    // combine kernel, where the PTX's split kernels reduce themselves.
    a.num_splits = 3;
    int before = fake().launches;
    ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(fake().launches - before, clusters ? 1 : 2);
    const FakeLaunch &split =
        clusters ? fake().lastLaunch : fake().previousLaunch;
    EXPECT_EQ(split.grid[2], 6u); // batch x splits
    EXPECT_EQ(split.clusterZ, clusters ? 3u : 0u);
    if (clusters) {
      EXPECT_EQ(split.clusterPolicy,
                int(CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING));
    }
    // Eight splits: more than a cluster takes, so the combine kernel.
    a.num_splits = 8;
    before = fake().launches;
    ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
    EXPECT_EQ(fake().launches - before, 2);
    EXPECT_EQ(fake().previousLaunch.clusterZ, 0u);
    if (clusters) {
      // Clusters that do not all fit at once would run a second wave: the
      // combine kernel instead (the fit is asked once per size).
      kiln_package_close(package);
      ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
      ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
      fake().activeClusters = 1;
      a.num_splits = 3;
      before = fake().launches;
      int queries = fake().clusterQueries;
      ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
      EXPECT_EQ(fake().launches - before, 2);
      EXPECT_EQ(fake().previousLaunch.clusterZ, 0u);
      ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
      EXPECT_EQ(fake().clusterQueries - queries, 1);
      fake().activeClusters = -1;
    }
    kiln_package_close(package);
    package = nullptr;
  }
}

TEST_F(SplitLaunchTest, TheWorkspaceBoundsTheSplits) {
  const kiln_site *site = openSplit();
  kiln_attention_args a = args(site, 1, 8, 2, 1, 4096);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_EQ(fake().launches, 1); // no workspace: one split, no combine
  EXPECT_EQ(fake().lastLaunch.grid[2], 1u);
  EXPECT_EQ(asI32(fake().lastLaunch.params[22]), 1);

  a.workspace = workspace;
  a.workspace_bytes = bytesFor(2) + 100;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_EQ(fake().launches, 3);
  EXPECT_EQ(fake().previousLaunch.grid[2], 2u);

  // A grid that fills the device is not split.
  kiln_attention_args big = args(site, 64, 8, 2, 1, 4096);
  big.workspace = workspace;
  big.workspace_bytes = sizeof(workspace);
  int64_t splits = 0;
  ASSERT_EQ(kiln_site_attention_splits(site, &big, &splits), KILN_OK);
  EXPECT_EQ(splits, 1);
}

TEST_F(SplitLaunchTest, ForcedSplitsAreChecked) {
  const kiln_site *site = openSplit();
  kiln_attention_args a = args(site, 1, 8, 2, 1, 4096);
  a.num_splits = 3;
  EXPECT_EQ(kiln_site_check_attention(site, &a, nullptr),
            KILN_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(),
              HasSubstr("3 splits need a 6336-byte workspace; got none"));
  a.workspace = workspace;
  a.workspace_bytes = bytesFor(3);
  kiln_launch_config config;
  ASSERT_EQ(kiln_site_check_attention(site, &a, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[2], 3u);
  a.num_splits = 129;
  EXPECT_EQ(kiln_site_check_attention(site, &a, nullptr),
            KILN_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), HasSubstr("num_splits must be 0"));
  a.num_splits = 2;
  a.workspace = workspace + 8;
  EXPECT_EQ(kiln_site_check_attention(site, &a, nullptr),
            KILN_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), HasSubstr("16-byte aligned"));

  // A kernel that does not split keys.
  const kiln_site *other = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_1", &other), KILN_OK);
  kiln_attention_args b = args(other, 1, 8, 2, 1, 64);
  b.num_splits = 2;
  EXPECT_EQ(kiln_site_check_attention(other, &b, nullptr),
            KILN_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), HasSubstr("does not split keys"));
  int64_t bytes = -1;
  ASSERT_EQ(kiln_site_workspace_size(other, 4, 8, 2, 1, 4096, &bytes), KILN_OK);
  EXPECT_EQ(bytes, 0);
}

TEST_F(SplitLaunchTest, ManifestChecksTheCombineKernel) {
  json manifest = splitManifest();
  manifest["sites"][0]["kernel"] = "kiln_split_combine_bf16_dv64";
  writeNamedPtx(manifest);
  EXPECT_EQ(open(), KILN_FORMAT_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("is a split-KV combine kernel"));

  manifest = splitManifest();
  manifest["kernels"][0]["split_combine"] = "kiln_attention_f16_d128_mask";
  writeNamedPtx(manifest);
  EXPECT_EQ(open(), KILN_FORMAT_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("is not a \"split_combine\""));

  manifest = validManifest();
  manifest["kernels"][1]["grid"][2]["times_splits"] = true;
  writeNamedPtx(manifest);
  EXPECT_EQ(open(), KILN_FORMAT_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("needs a kernel that splits keys"));
}

/// The warp-specialised kernel: taken for prefill shapes on sm_90a with
/// tensor maps encoded at launch, the portable kernel otherwise.
class WarpSpecializedLaunchTest : public LaunchTest {
protected:
  const kiln_site *openWarpSpecialized() {
    json manifest = warpSpecializedManifest();
    writePackage(manifest);
    // Only the sm_90a PTX has the kernel.
    for (const json &target : manifest["targets"]) {
      std::string chip = target["chip"].get<std::string>();
      std::string text = "// " + chip + "\n";
      for (const json &kernel : manifest["kernels"])
        if (!kernel.contains("targets") || chip == "sm_90a")
          text += ".entry " + kernel["name"].get<std::string>() + "\n";
      writeFile(target["ptx"].get<std::string>(), text);
    }
    EXPECT_EQ(open(), KILN_OK) << kiln_last_error();
    const kiln_site *site = nullptr;
    EXPECT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
    fake().expectedParams = 25;
    return site;
  }
  /// Whether the last launch was the warp-specialised kernel's.
  static bool launchedWarpSpecialized() {
    return fake().lastLaunch.block[0] == 512;
  }
};

TEST_F(WarpSpecializedLaunchTest, PrefillTakesItWithTensorMaps) {
  const kiln_site *site = openWarpSpecialized();
  kiln_attention_args a = args(site, 2, 8, 2, 4096, 4096);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  const FakeLaunch &launch = fake().lastLaunch;
  EXPECT_EQ(fake().launches, 1);
  ASSERT_TRUE(launchedWarpSpecialized());
  EXPECT_EQ(launch.grid[0], 22u); // ceil(4096 / 192)
  EXPECT_EQ(launch.grid[1], 8u);
  EXPECT_EQ(launch.grid[2], 2u);
  EXPECT_EQ(launch.sharedBytes, 90184u);
  EXPECT_EQ(fake().maxDynamicShared, 90184);
  // The maps follow the 22 portable arguments; each describes its tensor.
  EXPECT_EQ(launch.params[22], 0x10000u);
  EXPECT_EQ(launch.params[23], 0x20000u);
  EXPECT_EQ(launch.params[24], 0x30000u);
  ASSERT_EQ(fake().tensorMaps, 3);
  const auto &q = fake().tensorMapCalls[0];
  EXPECT_EQ(q.type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_EQ(q.rank, 4u);
  EXPECT_EQ(q.dims[0], 64u);
  EXPECT_EQ(q.dims[1], 4096u);
  EXPECT_EQ(q.dims[2], 8u);
  EXPECT_EQ(q.dims[3], 2u);
  EXPECT_EQ(q.strides[0], 64u * 2);        // seq, in bytes
  EXPECT_EQ(q.strides[1], 4096u * 64 * 2); // head
  EXPECT_EQ(q.strides[2], 8u * 4096 * 64 * 2);
  EXPECT_EQ(q.box[0], 64u);
  EXPECT_EQ(q.box[1], 192u);
  EXPECT_EQ(q.box[2], 1u);
  EXPECT_EQ(q.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  const auto &k = fake().tensorMapCalls[1];
  EXPECT_EQ(k.dims[2], 2u); // KV heads
  EXPECT_EQ(k.box[1], 128u);
  int64_t splits = 0;
  ASSERT_EQ(kiln_site_attention_splits(site, &a, &splits), KILN_OK);
  EXPECT_EQ(splits, 1);
}

TEST_F(WarpSpecializedLaunchTest, OtherLaunchesTakeThePortableKernel) {
  const kiln_site *site = openWarpSpecialized();
  // Decode-sized queries.
  kiln_attention_args a = args(site, 2, 8, 2, 17, 4096);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_FALSE(launchedWarpSpecialized());
  // A Q view TMA cannot read (not 16-byte aligned).
  a = args(site, 2, 8, 2, 4096, 4096);
  a.q = reinterpret_cast<void *>(0x10002);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK);
  EXPECT_FALSE(launchedWarpSpecialized());
  // A tensor map the driver refuses.
  a = args(site, 2, 8, 2, 4096, 4096);
  fake().tensorMapResult = CUDA_ERROR_INVALID_VALUE;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_FALSE(launchedWarpSpecialized());
  EXPECT_EQ(fake().launches, 3);
  EXPECT_EQ(fake().tensorMaps, 0);
}

/// A warp-specialised kernel that stages a one-row boolean mask beside K
/// (mask_map), named on a site of its own.
class StagedMaskLaunchTest : public LaunchTest {
protected:
  const kiln_site *openStaged() {
    json manifest = validManifest();
    const std::string portable = "kiln_attention_bf16_d64_causal_maski1";
    const std::string staged = "kiln_attention_ws_bf16_d64_causal_maski1_stk";
    manifest["kernels"].push_back(
        attentionKernel(portable, "bf16", 64, true, "boolean", "i1"));
    json kernel = warpSpecializedKernel();
    kernel["name"] = staged;
    kernel["mask"] = "boolean";
    kernel["mask_dtype"] = "i1";
    json args = attentionArgs("bf16", true, "i1", false);
    for (const auto &[name, tensor, dtype, columns, rows] :
         {std::tuple{"q_map", "q", "bf16", 64, 192},
          std::tuple{"k_map", "k", "bf16", 64, 128},
          std::tuple{"v_map", "v", "bf16", 64, 128},
          std::tuple{"mask_map", "mask", "i1", 128, 1}})
      args.push_back({{"name", name},
                      {"kind", "tensor_map"},
                      {"tensor", tensor},
                      {"dtype", dtype},
                      {"box", {columns, rows}},
                      {"swizzle", 128}});
    kernel["args"] = args;
    manifest["kernels"].push_back(kernel);
    json site = attentionSite("attention_m", portable, "bf16", 64, true, 8, 2,
                              "boolean", "i1");
    site["warp_specialized_kernel"] = staged;
    manifest["sites"].push_back(site);
    writePackage(manifest);
    for (const json &target : manifest["targets"]) {
      std::string chip = target["chip"].get<std::string>();
      std::string text = "// " + chip + "\n";
      for (const json &entry : manifest["kernels"])
        if (!entry.contains("targets") || chip == "sm_90a")
          text += ".entry " + entry["name"].get<std::string>() + "\n";
      writeFile(target["ptx"].get<std::string>(), text);
    }
    EXPECT_EQ(open(), KILN_OK) << kiln_last_error();
    const kiln_site *found = nullptr;
    EXPECT_EQ(kiln_package_find_site(package, "attention_m", &found), KILN_OK);
    return found;
  }
  /// A key-padding mask [batch, 1, 1, kv_len] over 4096 keys.
  kiln_attention_args maskedArgs(const kiln_site *site) {
    kiln_attention_args a = args(site, 2, 8, 2, 4096, 4096);
    int64_t strides[4] = {4096, 0, 0, 1};
    std::memcpy(a.mask_strides, strides, sizeof(strides));
    return a;
  }
  static bool launchedWarpSpecialized() {
    return fake().lastLaunch.block[0] == 512;
  }
};

TEST_F(StagedMaskLaunchTest, KeyPaddingMaskIsStagedByItsOwnMap) {
  const kiln_site *site = openStaged();
  fake().expectedParams = 31;
  kiln_attention_args a = maskedArgs(site);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  ASSERT_TRUE(launchedWarpSpecialized());
  ASSERT_EQ(fake().tensorMaps, 4);
  // The mask over {kv_len, q, heads, batch}: broadcast axes of size one.
  const auto &mask = fake().tensorMapCalls[3];
  EXPECT_EQ(mask.type, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  EXPECT_EQ(mask.address, 0x50000u);
  EXPECT_EQ(mask.dims[0], 4096u);
  EXPECT_EQ(mask.dims[1], 1u);
  EXPECT_EQ(mask.dims[2], 1u);
  EXPECT_EQ(mask.dims[3], 2u);
  EXPECT_EQ(mask.strides[2], 4096u); // batch, in bytes
  EXPECT_EQ(mask.box[0], 128u);
  EXPECT_EQ(mask.box[1], 1u);
  EXPECT_EQ(mask.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
}

TEST_F(StagedMaskLaunchTest, ViewsItCannotStageTakeThePortableKernel) {
  const kiln_site *site = openStaged();
  fake().expectedParams = 27;
  // Rows that differ by query: the one-row tile cannot serve them.
  kiln_attention_args a = maskedArgs(site);
  a.mask_strides[2] = 4096;
  a.mask_strides[0] = 4096 * 4096;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_FALSE(launchedWarpSpecialized());
  // Keys not contiguous.
  a = maskedArgs(site);
  a.mask_strides[3] = 2;
  a.mask_strides[0] = 8192;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_FALSE(launchedWarpSpecialized());
  // A batch stride that is not a multiple of 16 bytes.
  a = maskedArgs(site);
  a.mask_strides[0] = 4100;
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_FALSE(launchedWarpSpecialized());
  EXPECT_EQ(fake().launches, 3);
}

TEST_F(WarpSpecializedLaunchTest, Sm80NeverLoadsIt) {
  fake().major = 8;
  const kiln_site *site = openWarpSpecialized();
  kiln_attention_args a = args(site, 2, 8, 2, 4096, 4096);
  ASSERT_EQ(kiln_site_launch_attention(site, &a, nullptr), KILN_OK)
      << kiln_last_error();
  EXPECT_FALSE(launchedWarpSpecialized());
  EXPECT_EQ(fake().tensorMaps, 0);
  EXPECT_NE(fake().loadedPtx.find("sm_80"), std::string::npos);
  EXPECT_EQ(kiln_package_prepare(package), KILN_OK) << kiln_last_error();
}
