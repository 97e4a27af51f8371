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
