//===- LaunchArgsTest.cpp - Checks of attention launch arguments ----------===//
//
// Every argument check happens before the CUDA driver is touched, so these
// tests run without a GPU. Device pointers are fake (never dereferenced).
//
//===----------------------------------------------------------------------===//

#include "PackageFixture.h"

#include <cstring>

using namespace kiln::test;
using ::testing::HasSubstr;

namespace {

/// Fake, suitably aligned device addresses.
void *fakePointer(uintptr_t index) {
  return reinterpret_cast<void *>(uintptr_t{0x7f0000000000} + index * 0x1000);
}

/// Valid arguments for `site` with contiguous tensors.
kiln_attention_args validArgs(const kiln_site *site, int64_t batch,
                              int64_t qHeads, int64_t kvHeads, int64_t qLen,
                              int64_t kvLen) {
  kiln_site_info info;
  EXPECT_EQ(kiln_site_get_info(site, &info), KILN_OK);
  kiln_attention_args args;
  kiln_attention_args_init(&args);
  args.q = fakePointer(1);
  args.k = fakePointer(2);
  args.v = fakePointer(3);
  args.out = fakePointer(4);
  args.q_dtype = args.k_dtype = args.v_dtype = args.out_dtype = info.dtype;
  if (info.mask != KILN_MASK_NONE) {
    args.mask = fakePointer(5);
    args.mask_dtype = info.mask_dtype;
  }
  args.batch = batch;
  args.q_heads = qHeads;
  args.kv_heads = kvHeads;
  args.q_len = qLen;
  args.kv_len = kvLen;
  args.head_dim = info.head_dim;
  EXPECT_EQ(kiln_attention_args_set_contiguous(site, &args), KILN_OK)
      << kiln_last_error();
  return args;
}

class LaunchArgsTest : public PackageTest {
protected:
  /// Expects the check and the launch to fail with `parts` in the message.
  void expectInvalid(const kiln_attention_args &args,
                     std::initializer_list<const char *> parts,
                     kiln_status status = KILN_INVALID_ARGUMENT) {
    EXPECT_EQ(kiln_site_check_attention(site, &args, nullptr), status)
        << kiln_last_error();
    std::string message = kiln_last_error();
    for (const char *part : parts)
      EXPECT_THAT(message, HasSubstr(part));
    // A launch reports the same error, before touching the driver.
    EXPECT_EQ(kiln_site_launch_attention(site, &args, nullptr), status);
    EXPECT_EQ(message, kiln_last_error());
  }

  const kiln_site *site = nullptr;
};

TEST_F(LaunchArgsTest, ValidArgumentsGiveTheLaunchConfig) {
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 2, 8, 2, 1000, 1000);
  kiln_launch_config config;
  ASSERT_EQ(kiln_site_check_attention(site, &args, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[0], 63u); // ceil(1000 / 16)
  EXPECT_EQ(config.grid[1], 8u);
  EXPECT_EQ(config.grid[2], 2u);
  EXPECT_EQ(config.block[0], 128u);
  EXPECT_EQ(config.block[1], 1u);
  EXPECT_EQ(config.dynamic_shared_bytes, 0u);
}

TEST_F(LaunchArgsTest, ContiguousStridesFollowTheLayout) {
  int64_t strides[4];
  ASSERT_EQ(kiln_contiguous_strides(KILN_LAYOUT_BHSD, 2, 8, 100, 64, strides),
            KILN_OK);
  EXPECT_EQ(strides[0], 8 * 100 * 64);
  EXPECT_EQ(strides[1], 100 * 64);
  EXPECT_EQ(strides[2], 64);
  EXPECT_EQ(strides[3], 1);
  // bshd: [B, S, H, D]; strides stay ordered {batch, head, seq, head_dim}.
  ASSERT_EQ(kiln_contiguous_strides(KILN_LAYOUT_BSHD, 2, 8, 100, 64, strides),
            KILN_OK);
  EXPECT_EQ(strides[0], 100 * 8 * 64);
  EXPECT_EQ(strides[1], 64);
  EXPECT_EQ(strides[2], 8 * 64);
  EXPECT_EQ(strides[3], 1);
  EXPECT_EQ(kiln_contiguous_strides(KILN_LAYOUT_BSHD, 0, 8, 100, 64, strides),
            KILN_INVALID_ARGUMENT);

  site = nullptr;
  const kiln_site *bshd = openSite("attention_2");
  kiln_attention_args args = validArgs(bshd, 2, 8, 2, 10, 12);
  EXPECT_EQ(args.k_strides[0], 12 * 2 * 64);
  EXPECT_EQ(args.k_strides[1], 64);
  EXPECT_EQ(args.k_strides[2], 2 * 64);
  EXPECT_EQ(args.out_strides[2], 8 * 64);
  EXPECT_EQ(kiln_site_check_attention(bshd, &args, nullptr), KILN_OK)
      << kiln_last_error();
}

TEST_F(LaunchArgsTest, MaskStridesAreOverTheLogicalShape) {
  site = openSite("attention_1");
  kiln_attention_args args = validArgs(site, 2, 4, 4, 5, 7);
  EXPECT_EQ(args.mask_strides[0], 4 * 5 * 7);
  EXPECT_EQ(args.mask_strides[1], 5 * 7);
  EXPECT_EQ(args.mask_strides[2], 7);
  EXPECT_EQ(args.mask_strides[3], 1);
  // Broadcast over heads and query rows.
  args.mask_strides[1] = args.mask_strides[2] = 0;
  EXPECT_EQ(kiln_site_check_attention(site, &args, nullptr), KILN_OK)
      << kiln_last_error();
}

TEST_F(LaunchArgsTest, NullArgumentStruct) {
  site = openSite("attention_0");
  EXPECT_EQ(kiln_site_check_attention(site, nullptr, nullptr),
            KILN_INVALID_ARGUMENT);
  EXPECT_THAT(kiln_last_error(), HasSubstr("argument struct is NULL"));
  EXPECT_EQ(kiln_site_launch_attention(site, nullptr, nullptr),
            KILN_INVALID_ARGUMENT);
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  EXPECT_EQ(kiln_site_launch_attention(nullptr, &args, nullptr),
            KILN_INVALID_ARGUMENT);
}

TEST_F(LaunchArgsTest, NullTensors) {
  site = openSite("attention_0");
  const kiln_attention_args valid = validArgs(site, 1, 8, 2, 4, 4);
  kiln_attention_args args = valid;
  args.q = nullptr;
  expectInvalid(args, {"site \"attention_0\"", "q is NULL"});
  args = valid;
  args.k = nullptr;
  expectInvalid(args, {"k is NULL"});
  args = valid;
  args.v = nullptr;
  expectInvalid(args, {"v is NULL"});
  args = valid;
  args.out = nullptr;
  expectInvalid(args, {"out is NULL"});
}

TEST_F(LaunchArgsTest, NonPositiveDimensions) {
  site = openSite("attention_0");
  const kiln_attention_args valid = validArgs(site, 1, 8, 2, 4, 4);
  kiln_attention_args args = valid;
  args.batch = -1;
  expectInvalid(args, {"batch must be positive, got -1"});
  args = valid;
  args.q_len = -3;
  expectInvalid(args, {"q_len must be positive, got -3"});
  args = valid;
  args.kv_len = 0;
  expectInvalid(args, {"kv_len must be positive"});
}

TEST_F(LaunchArgsTest, WrongDtype) {
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  args.q_dtype = KILN_DTYPE_F16;
  expectInvalid(args, {"q has dtype f16 but the site takes bf16"});
  args.q_dtype = KILN_DTYPE_BF16;
  args.out_dtype = KILN_DTYPE_F32;
  expectInvalid(args, {"out has dtype f32 but the site takes bf16"});
  args.out_dtype = KILN_DTYPE_NONE;
  expectInvalid(args, {"out has dtype none"});
}

TEST_F(LaunchArgsTest, StaticSiteDimensionsMustMatch) {
  site = openSite("attention_0");
  const kiln_attention_args valid = validArgs(site, 1, 8, 2, 4, 4);
  kiln_attention_args args = valid;
  args.head_dim = 128;
  expectInvalid(args,
                {"head_dim is 128 but the site was compiled for head_dim = "
                 "64"});
  args = valid;
  args.q_heads = 16;
  expectInvalid(args, {"q_heads is 16 but the site was compiled for "
                       "q_heads = 8"});
  args = valid;
  args.kv_heads = 8;
  expectInvalid(args, {"kv_heads is 8"});
}

TEST_F(LaunchArgsTest, DynamicHeadsMustGroup) {
  site = openSite("attention_1");
  kiln_attention_args args = validArgs(site, 1, 12, 8, 4, 4);
  expectInvalid(args, {"q_heads (12) is not a multiple of kv_heads (8)"});
  args = validArgs(site, 1, 12, 4, 4, 4);
  EXPECT_EQ(kiln_site_check_attention(site, &args, nullptr), KILN_OK)
      << kiln_last_error();
  args.head_dim = 64;
  expectInvalid(args, {"head_dim is 64"});
}

TEST_F(LaunchArgsTest, MaskMustMatchTheSite) {
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  args.mask = fakePointer(9);
  args.mask_dtype = KILN_DTYPE_F32;
  expectInvalid(args, {"a mask was given but the site has no mask"});
  args.mask = nullptr;
  args.bias = fakePointer(9);
  args.bias_dtype = KILN_DTYPE_BF16;
  expectInvalid(args, {"a bias was given but the site has no bias"});

  const kiln_site *masked = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "attention_1", &masked), KILN_OK);
  site = masked;
  const kiln_attention_args valid = validArgs(site, 1, 4, 4, 4, 4);
  args = valid;
  args.mask = nullptr;
  expectInvalid(args, {"the site needs a additive mask (f32) but none was "
                       "given"});
  args = valid;
  args.mask_dtype = KILN_DTYPE_BOOL;
  expectInvalid(args, {"mask has dtype i1 but the site takes f32"});
  args = valid;
  args.mask_strides[2] = -1;
  expectInvalid(args, {"mask has a negative q stride (-1)"});
}

TEST_F(LaunchArgsTest, Strides) {
  site = openSite("attention_0");
  const kiln_attention_args valid = validArgs(site, 2, 8, 2, 4, 4);
  kiln_attention_args args = valid;
  args.k_strides[3] = 2;
  expectInvalid(args,
                {"k must be contiguous along head_dim", "head_dim stride 2"});
  args = valid;
  args.v_strides[1] = -64;
  expectInvalid(args, {"v has a negative head stride (-64)"});
  args = valid;
  args.out_strides[0] = 0;
  expectInvalid(args, {"out has a zero batch stride"});
  // K and V may be shared by all batch entries.
  args = valid;
  args.k_strides[0] = args.v_strides[0] = 0;
  EXPECT_EQ(kiln_site_check_attention(site, &args, nullptr), KILN_OK)
      << kiln_last_error();
}

TEST_F(LaunchArgsTest, MisalignedPointer) {
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  args.v = static_cast<const char *>(args.v) + 1;
  expectInvalid(args, {"v is not aligned to its 2-byte elements"});
}

TEST_F(LaunchArgsTest, Int32Overflow) {
  site = openSite("attention_0");
  // q_len is an i32 kernel argument.
  kiln_attention_args args = validArgs(site, 1, 8, 2, int64_t{3} << 30, 4);
  expectInvalid(args, {"q_len = 3221225472 does not fit kernel",
                       "32-bit argument \"q_len\""});
}

TEST_F(LaunchArgsTest, GridOverCudaLimits) {
  site = openSite("attention_1");
  // grid.y = q_heads.
  kiln_attention_args args = validArgs(site, 1, 70000, 1, 4, 4);
  expectInvalid(args, {"grid.y = ceil(q_heads / 1) = 70000",
                       "over CUDA's limit of 65535"});
}

TEST_F(LaunchArgsTest, EmptyBatchLaunchesNothing) {
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  args.batch = 0;
  // An empty batch's tensors may be NULL (an empty tensor's data pointer).
  args.q = args.k = args.v = nullptr;
  args.out = nullptr;
  kiln_launch_config config;
  std::memset(&config, 0xff, sizeof(config));
  ASSERT_EQ(kiln_site_check_attention(site, &args, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[0] | config.grid[1] | config.grid[2], 0u);
  // No driver is touched: this machine has none, and the launch succeeds.
  EXPECT_EQ(kiln_site_launch_attention(site, &args, nullptr), KILN_OK)
      << kiln_last_error();
}

TEST_F(LaunchArgsTest, BatchOverTheGridRunsInParts) {
  site = openSite("attention_1");
  // grid.z = batch: more than 65535 sequences run as several launches; the
  // check reports the first one's configuration.
  kiln_attention_args args = validArgs(site, 70000, 1, 1, 4, 4);
  kiln_launch_config config;
  ASSERT_EQ(kiln_site_check_attention(site, &args, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[2], 65535u);
}

/// A package whose kernel takes 32-bit strides: a large tensor's strides
/// overflow them.
TEST_F(LaunchArgsTest, Int32StrideOverflow) {
  json manifest = validManifest();
  manifest["kernels"][0]["args"] =
      attentionArgs("bf16", false, "", false, "i32", "i32");
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args args = validArgs(site, 2, 8, 2, 1 << 22, 1 << 10);
  expectInvalid(args, {"q_stride_batch = 2147483648", "does not fit",
                       "\"q_stride_batch\""});
  args = validArgs(site, 2, 8, 2, 1 << 10, 1 << 10);
  EXPECT_EQ(kiln_site_check_attention(site, &args, nullptr), KILN_OK)
      << kiln_last_error();
}

/// The grid rule may multiply dimensions and use a constant.
TEST_F(LaunchArgsTest, GridRuleProductsAndConstants) {
  json manifest = validManifest();
  manifest["kernels"][0]["grid"] = {
      {{"dim", {"q_heads", "batch"}}, {"ceil_div", 4}}, {{"value", 3}}, 1};
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args args = validArgs(site, 3, 8, 2, 4, 4);
  kiln_launch_config config;
  ASSERT_EQ(kiln_site_check_attention(site, &args, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[0], 6u); // ceil(8 * 3 / 4)
  EXPECT_EQ(config.grid[1], 3u);
  EXPECT_EQ(config.grid[2], 1u);
}

/// "per" divides the product exactly before the ceil_div: the grid of a
/// kernel that packs each KV head's query heads into its rows.
TEST_F(LaunchArgsTest, GridRulePerDimension) {
  json manifest = validManifest();
  manifest["kernels"][0]["grid"] = {
      {{"dim", {"q_len", "q_heads"}}, {"per", "kv_heads"}, {"ceil_div", 64}},
      {{"dim", "kv_heads"}},
      {{"dim", "batch"}}};
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  kiln_attention_args args = validArgs(site, 3, 8, 2, 1000, 1000);
  kiln_launch_config config;
  ASSERT_EQ(kiln_site_check_attention(site, &args, &config), KILN_OK)
      << kiln_last_error();
  EXPECT_EQ(config.grid[0], 63u); // ceil(1000 * 8 / 2 / 64)
  EXPECT_EQ(config.grid[1], 2u);
  EXPECT_EQ(config.grid[2], 3u);

  // A "per" that does not divide the product is a launch error, not a
  // truncated grid.
  manifest["kernels"][0]["grid"][0] = {
      {"dim", "q_len"}, {"per", "kv_heads"}, {"ceil_div", 1}};
  kiln_package_close(package);
  package = nullptr;
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_package_find_site(package, "attention_0", &site), KILN_OK);
  args = validArgs(site, 3, 8, 2, 999, 999);
  expectInvalid(args, {"grid.x", "is not a multiple of kv_heads"});
}

/// With valid arguments and no usable CUDA driver (the test main points
/// KILN_CUDA_DRIVER_LIB at a missing file), a launch fails cleanly.
TEST_F(LaunchArgsTest, MissingDriverIsACleanError) {
  if (std::getenv("KILN_UNIT_TEST_REAL_DRIVER"))
    GTEST_SKIP() << "runs against the real driver";
  site = openSite("attention_0");
  kiln_attention_args args = validArgs(site, 1, 8, 2, 4, 4);
  ASSERT_EQ(kiln_site_check_attention(site, &args, nullptr), KILN_OK);
  EXPECT_EQ(kiln_site_launch_attention(site, &args, nullptr), KILN_CUDA_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("cannot load the CUDA driver"));
  EXPECT_EQ(kiln_package_prepare(package), KILN_CUDA_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("cannot load the CUDA driver"));
  EXPECT_EQ(kiln_cuda_driver_load(), KILN_CUDA_ERROR);
}

} // namespace
