//===- ManifestTest.cpp - Opening packages and reading manifests ----------===//
//
// A valid package opens and reports its sites; every kind of damage to a
// package gives a precise status and a message that names the file and key.
//
//===----------------------------------------------------------------------===//

#include "PackageFixture.h"

#include "kiln/Runtime/Runtime.h"

#include <functional>
#include <thread>

using namespace kiln::test;
using ::testing::HasSubstr;

namespace {

TEST_F(PackageTest, OpensValidPackage) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_STREQ(kiln_package_producer(package), "kilnc 0.1.0");
  EXPECT_EQ(kiln_package_num_sites(package), 3);
  EXPECT_EQ(kiln_package_num_kernels(package), 2);
  EXPECT_EQ(kiln_package_num_targets(package), 2);

  const char *chip = nullptr;
  ASSERT_EQ(kiln_package_get_target(package, 1, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_80");

  kiln_kernel_info kernel;
  ASSERT_EQ(kiln_package_get_kernel(package, 1, &kernel), KILN_OK);
  EXPECT_STREQ(kernel.name, "kiln_attention_f16_d128_mask");
  EXPECT_EQ(kernel.dtype, KILN_DTYPE_F16);
  EXPECT_EQ(kernel.head_dim, 128);
  EXPECT_EQ(kernel.block[0], 128);
  EXPECT_EQ(kernel.static_shared_bytes, 41472);
  // 4 tensors + mask, 5 dims, scale, 12 strides, 4 mask strides.
  EXPECT_EQ(kernel.num_args, 27);
}

TEST_F(PackageTest, ReportsSiteAttributes) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_get_site(package, 0, &site), KILN_OK);
  kiln_site_info info;
  ASSERT_EQ(kiln_site_get_info(site, &info), KILN_OK);
  EXPECT_STREQ(info.name, "attention_0");
  EXPECT_STREQ(info.kernel, "kiln_attention_bf16_d64_causal");
  EXPECT_STREQ(info.function, "main");
  EXPECT_STREQ(info.location, "model.mlir:3:10");
  EXPECT_EQ(info.layout, KILN_LAYOUT_BHSD);
  EXPECT_EQ(info.dtype, KILN_DTYPE_BF16);
  EXPECT_FLOAT_EQ(info.scale, 0.125f);
  EXPECT_EQ(info.causal, 1);
  EXPECT_EQ(info.window, 0);
  EXPECT_EQ(info.has_softcap, 0);
  EXPECT_EQ(info.batch, KILN_DYNAMIC);
  EXPECT_EQ(info.q_heads, 8);
  EXPECT_EQ(info.kv_heads, 2);
  EXPECT_EQ(info.q_len, KILN_DYNAMIC);
  EXPECT_EQ(info.head_dim, 64);
  EXPECT_EQ(info.mask, KILN_MASK_NONE);
  EXPECT_EQ(info.mask_dtype, KILN_DTYPE_NONE);
  EXPECT_EQ(info.bias, 0);

  ASSERT_EQ(kiln_package_find_site(package, "attention_1", &site), KILN_OK);
  ASSERT_EQ(kiln_site_get_info(site, &info), KILN_OK);
  EXPECT_EQ(info.mask, KILN_MASK_ADDITIVE);
  EXPECT_EQ(info.mask_dtype, KILN_DTYPE_F32);
  EXPECT_EQ(info.q_heads, KILN_DYNAMIC);

  ASSERT_EQ(kiln_package_find_site(package, "attention_2", &site), KILN_OK);
  ASSERT_EQ(kiln_site_get_info(site, &info), KILN_OK);
  EXPECT_EQ(info.layout, KILN_LAYOUT_BSHD);
}

/// validManifest with attention_1 taking a run-time scale: its kernel's
/// last argument the factor's pointer, the site's "scale_factor" `factor`.
json scaleFactorManifest(json factor) {
  json manifest = validManifest();
  manifest["kernels"][1]["args"].push_back(
      {{"name", "scale_factor"}, {"kind", "pointer"}});
  manifest["sites"][1]["scale_factor"] = std::move(factor);
  return manifest;
}

/// kiln_site_info.scale_factor of `package`'s attention_1.
int32_t siteScaleFactor(kiln_package *package) {
  const kiln_site *site = nullptr;
  kiln_site_info info;
  if (kiln_package_find_site(package, "attention_1", &site) != KILN_OK ||
      kiln_site_get_info(site, &info) != KILN_OK)
    return -1;
  return info.scale_factor;
}

// A run-time scale: `true` (as every manifest before per-head factors
// wrote it) is one f32, "per_head" one a query head; none without the key.
TEST_F(PackageTest, ReportsTheRunTimeScale) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(siteScaleFactor(package), 0);
  kiln_package_close(package);
  package = nullptr;

  writePackage(scaleFactorManifest(true));
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(siteScaleFactor(package), 1);
  kiln_package_close(package);
  package = nullptr;

  writePackage(scaleFactorManifest("per_head"));
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  EXPECT_EQ(siteScaleFactor(package), 2);
}

TEST_F(PackageTest, UnknownSiteListsTheSites) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const kiln_site *site = nullptr;
  EXPECT_EQ(kiln_package_find_site(package, "attention_9", &site),
            KILN_NOT_FOUND);
  EXPECT_EQ(site, nullptr);
  EXPECT_THAT(kiln_last_error(), HasSubstr("no site \"attention_9\""));
  EXPECT_THAT(kiln_last_error(),
              HasSubstr("attention_0, attention_1, attention_2"));
  EXPECT_EQ(kiln_package_get_site(package, 3, &site), KILN_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_package_get_site(package, -1, &site), KILN_INVALID_ARGUMENT);
}

TEST_F(PackageTest, SelectsThePtxForTheDevice) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const char *chip = nullptr;
  ASSERT_EQ(kiln_package_select_target(package, 9, 0, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_90a");
  ASSERT_EQ(kiln_package_select_target(package, 8, 6, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_80");
  ASSERT_EQ(kiln_package_select_target(package, 8, 0, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_80");
  // sm_90a PTX only runs on 9.0 devices; a newer one JITs the sm_80 PTX.
  ASSERT_EQ(kiln_package_select_target(package, 10, 0, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_80");
  EXPECT_EQ(kiln_package_select_target(package, 7, 5, &chip),
            KILN_UNSUPPORTED);
  EXPECT_THAT(kiln_last_error(), HasSubstr("compute capability 7.5"));
}

TEST_F(PackageTest, PrefersPlainPtxOfTheSameDeviceToOlderPtx) {
  json manifest = validManifest();
  manifest["targets"] = {{{"chip", "sm_80"}, {"ptx", "a.ptx"}},
                         {{"chip", "sm_90"}, {"ptx", "b.ptx"}}};
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
  const char *chip = nullptr;
  ASSERT_EQ(kiln_package_select_target(package, 9, 0, &chip), KILN_OK);
  EXPECT_STREQ(chip, "sm_90");
}

TEST_F(PackageTest, AcceptsGridDependencyFlag) {
  json manifest = validManifest();
  manifest["targets"][0]["grid_dependency"] = true;
  manifest["targets"][1]["grid_dependency"] = false;
  manifest["targets"][0]["attention_grid_dependency"] = true;
  manifest["targets"][1]["attention_grid_dependency"] = false;
  writePackage(manifest);
  ASSERT_EQ(open(), KILN_OK) << kiln_last_error();
}

TEST_F(PackageTest, MissingDirectory) {
  dir += "/does-not-exist";
  EXPECT_EQ(open(), KILN_NOT_FOUND);
  EXPECT_EQ(package, nullptr);
  EXPECT_THAT(kiln_last_error(), HasSubstr("does-not-exist"));
}

TEST_F(PackageTest, PathIsAFile) {
  writeFile("plain", "x");
  std::string file = dir + "/plain";
  EXPECT_EQ(kiln_package_open(file.c_str(), &package), KILN_IO_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("is not a directory"));
}

TEST_F(PackageTest, MissingManifest) {
  EXPECT_EQ(open(), KILN_NOT_FOUND);
  EXPECT_THAT(kiln_last_error(), HasSubstr(dir + "/manifest.json"));
}

TEST_F(PackageTest, NullArguments) {
  EXPECT_EQ(kiln_package_open(nullptr, &package), KILN_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_package_open(dir.c_str(), nullptr), KILN_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_package_num_sites(nullptr), 0);
  kiln_package_close(nullptr);
  kiln_site_info info;
  EXPECT_EQ(kiln_site_get_info(nullptr, &info), KILN_INVALID_ARGUMENT);
}

TEST_F(PackageTest, TruncatedJson) {
  std::string text = validManifest().dump(2);
  writePackage(validManifest());
  writeFile("manifest.json", text.substr(0, text.size() / 2));
  EXPECT_EQ(open(), KILN_FORMAT_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("manifest.json: not valid JSON"));
  EXPECT_THAT(kiln_last_error(), HasSubstr("line"));
}

TEST_F(PackageTest, EmptyManifest) {
  writeFile("manifest.json", "");
  EXPECT_EQ(open(), KILN_FORMAT_ERROR);
  EXPECT_THAT(kiln_last_error(), HasSubstr("not valid JSON"));
}

TEST_F(PackageTest, MissingPtxFile) {
  writePackage(validManifest());
  ASSERT_EQ(std::remove((dir + "/kernels.sm_80.ptx").c_str()), 0);
  EXPECT_EQ(open(), KILN_NOT_FOUND);
  EXPECT_THAT(kiln_last_error(), HasSubstr("targets[1].ptx"));
  EXPECT_THAT(kiln_last_error(), HasSubstr("kernels.sm_80.ptx"));
}

TEST_F(PackageTest, CxxWrapper) {
  writePackage(validManifest());
  kiln::runtime::Package opened;
  kiln::runtime::Status status =
      kiln::runtime::Package::open(dir, opened);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(opened.numSites(), 3);
  kiln::runtime::Site site;
  EXPECT_TRUE(opened.findSite("attention_1", site).ok());
  kiln::runtime::Status missing = opened.findSite("nope", site);
  EXPECT_EQ(missing.code(), KILN_NOT_FOUND);
  EXPECT_THAT(missing.message(), HasSubstr("\"nope\""));
  kiln::runtime::Package other;
  EXPECT_EQ(kiln::runtime::Package::open(dir + "/x", other).code(),
            KILN_NOT_FOUND);
}

TEST_F(PackageTest, LastErrorIsPerThread) {
  writePackage(validManifest());
  ASSERT_EQ(open(), KILN_OK);
  const kiln_site *site = nullptr;
  ASSERT_EQ(kiln_package_find_site(package, "missing", &site), KILN_NOT_FOUND);
  std::string mine = kiln_last_error();
  std::thread other([&] {
    kiln_package *other = nullptr;
    EXPECT_NE(kiln_package_open("/nonexistent/kiln", &other), KILN_OK);
  });
  other.join();
  EXPECT_EQ(mine, kiln_last_error());
}

//===----------------------------------------------------------------------===//
// Corruptions: one manifest change each, the status and the message parts.
//===----------------------------------------------------------------------===//

struct Corruption {
  const char *name;
  std::function<void(json &)> mutate;
  kiln_status status;
  std::vector<std::string> messageParts;
};

void PrintTo(const Corruption &corruption, std::ostream *os) {
  *os << corruption.name;
}

class CorruptManifestTest : public PackageTest,
                            public ::testing::WithParamInterface<Corruption> {
};

TEST_P(CorruptManifestTest, IsRejectedWithAPreciseMessage) {
  const Corruption &corruption = GetParam();
  json manifest = validManifest();
  corruption.mutate(manifest);
  writePackage(manifest);
  EXPECT_EQ(open(), corruption.status)
      << kiln_status_string(open()) << ": " << kiln_last_error();
  EXPECT_EQ(package, nullptr);
  std::string message = kiln_last_error();
  EXPECT_THAT(message, HasSubstr("manifest.json"));
  for (const std::string &part : corruption.messageParts)
    EXPECT_THAT(message, HasSubstr(part));
}

const Corruption corruptions[] = {
    {"NotAnObject",
     [](json &m) {
       m = json::array({1, 2});
     },
     KILN_FORMAT_ERROR,
     {"expected a JSON object at the top level"}},
    {"WrongFormat",
     [](json &m) { m["format"] = "onnx"; },
     KILN_FORMAT_ERROR,
     {"format: expected \"kiln-package\", got \"onnx\""}},
    {"UnknownVersion",
     [](json &m) { m["format_version"] = 2; },
     KILN_UNSUPPORTED,
     {"format_version", "format version 2 is not supported"}},
    {"VersionAsString",
     [](json &m) { m["format_version"] = "1"; },
     KILN_FORMAT_ERROR,
     {"format_version: expected an integer, got string"}},
    {"MissingKernels",
     [](json &m) { m.erase("kernels"); },
     KILN_FORMAT_ERROR,
     {"missing key \"kernels\""}},
    {"MissingSites",
     [](json &m) { m.erase("sites"); },
     KILN_FORMAT_ERROR,
     {"missing key \"sites\""}},
    {"NoTargets",
     [](json &m) { m["targets"] = json::array(); },
     KILN_FORMAT_ERROR,
     {"targets: a package needs at least one target"}},
    {"BadChip",
     [](json &m) { m["targets"][0]["chip"] = "hopper"; },
     KILN_FORMAT_ERROR,
     {"targets[0].chip", "\"hopper\""}},
    {"PtxNotAString",
     [](json &m) { m["targets"][1]["ptx"] = 7; },
     KILN_FORMAT_ERROR,
     {"targets[1].ptx: expected a string, got integer"}},
    {"GridDependencyNotABoolean",
     [](json &m) { m["targets"][0]["grid_dependency"] = "yes"; },
     KILN_FORMAT_ERROR,
     {"targets[0].grid_dependency", "got string"}},
    {"AttentionGridDependencyNotABoolean",
     [](json &m) { m["targets"][1]["attention_grid_dependency"] = 1; },
     KILN_FORMAT_ERROR,
     {"targets[1].attention_grid_dependency", "got integer"}},
    {"ClusterSplitsOutOfRange",
     [](json &m) { m["targets"][0]["cluster_splits"] = 32; },
     KILN_FORMAT_ERROR,
     {"targets[0].cluster_splits", "got 32"}},
    {"ClusterSplitsNotAnInteger",
     [](json &m) { m["targets"][0]["cluster_splits"] = true; },
     KILN_FORMAT_ERROR,
     {"targets[0].cluster_splits", "got boolean"}},
    {"HeadDimAsString",
     [](json &m) { m["kernels"][0]["head_dim"] = "64"; },
     KILN_FORMAT_ERROR,
     {"kernels[0].head_dim: expected an integer, got string"}},
    {"NegativeHeadDim",
     [](json &m) { m["sites"][1]["head_dim"] = -4; },
     KILN_FORMAT_ERROR,
     {"sites[1].head_dim", "got -4"}},
    {"UnknownDtype",
     [](json &m) { m["kernels"][1]["dtype"] = "f8"; },
     KILN_FORMAT_ERROR,
     {"kernels[1].dtype", "got \"f8\""}},
    {"CausalAsInt",
     [](json &m) { m["sites"][0]["causal"] = 1; },
     KILN_FORMAT_ERROR,
     {"sites[0].causal: expected a boolean, got integer"}},
    {"BlockOfTwo",
     [](json &m) {
       m["kernels"][0]["block"] = {128, 1};
     },
     KILN_FORMAT_ERROR,
     {"kernels[0].block: expected 3 entries, got 2"}},
    {"TooManyThreads",
     [](json &m) {
       m["kernels"][0]["block"] = {1024, 2, 1};
     },
     KILN_FORMAT_ERROR,
     {"2048 threads"}},
    {"UnknownGridDim",
     [](json &m) { m["kernels"][0]["grid"][0]["dim"] = "tokens"; },
     KILN_FORMAT_ERROR,
     {"kernels[0].grid[0].dim", "\"tokens\""}},
    {"ZeroCeilDiv",
     [](json &m) { m["kernels"][0]["grid"][0]["ceil_div"] = 0; },
     KILN_FORMAT_ERROR,
     {"kernels[0].grid[0].ceil_div"}},
    {"UnknownGridPerDim",
     [](json &m) { m["kernels"][0]["grid"][0]["per"] = "groups"; },
     KILN_FORMAT_ERROR,
     {"kernels[0].grid[0].per", "\"groups\""}},
    {"UnknownArgName",
     [](json &m) { m["kernels"][0]["args"][4]["name"] = "tokens"; },
     KILN_FORMAT_ERROR,
     {"kernels[0].args[4].name", "unknown kernel argument \"tokens\""}},
    {"UnknownArgKind",
     [](json &m) { m["kernels"][0]["args"][5]["kind"] = "u8"; },
     KILN_FORMAT_ERROR,
     {"kernels[0].args[5].kind", "got \"u8\""}},
    {"PointerAsInteger",
     [](json &m) { m["kernels"][0]["args"][0]["kind"] = "i64"; },
     KILN_FORMAT_ERROR,
     {"argument \"q\" must be \"pointer\""}},
    {"ScaleAsInteger",
     [](json &m) { m["kernels"][0]["args"][9]["kind"] = "i32"; },
     KILN_FORMAT_ERROR,
     {"argument \"scale\" must be \"f32\""}},
    {"LseAsInteger",
     [](json &m) {
       m["kernels"][0]["args"].push_back({{"name", "lse"}, {"kind", "i32"}});
     },
     KILN_FORMAT_ERROR,
     {"argument \"lse\" must be \"pointer\""}},
    {"GradStrideAsFloat",
     [](json &m) {
       m["kernels"][0]["args"].push_back(
           {{"name", "grad_q_stride_seq"}, {"kind", "f32"}});
     },
     KILN_FORMAT_ERROR,
     {"argument \"grad_q_stride_seq\" must be \"i32\" or \"i64\""}},
    {"DuplicateArg",
     [](json &m) { m["kernels"][0]["args"][1]["name"] = "q"; },
     KILN_FORMAT_ERROR,
     {"duplicate argument \"q\""}},
    {"MissingOutArg",
     [](json &m) { m["kernels"][0]["args"].erase(3); },
     KILN_FORMAT_ERROR,
     {"kernels[0].args", "missing the \"out\" pointer argument"}},
    {"MaskArgWithoutMask",
     [](json &m) {
       m["kernels"][0]["args"].push_back(
           {{"name", "mask"}, {"kind", "pointer"}});
     },
     KILN_FORMAT_ERROR,
     {"takes a \"mask\" argument but its \"mask\" is"}},
    {"MaskWithoutMaskArg",
     [](json &m) { m["kernels"][1]["args"].erase(4); },
     KILN_FORMAT_ERROR,
     {"kernels[1].args", "has a mask but no \"mask\" argument"}},
    {"AdditiveMaskWithoutDtype",
     [](json &m) { m["kernels"][1]["mask_dtype"] = nullptr; },
     KILN_FORMAT_ERROR,
     {"kernels[1].mask_dtype", "float dtype"}},
    {"UnknownMaskKind",
     [](json &m) { m["sites"][1]["mask"] = "weird"; },
     KILN_FORMAT_ERROR,
     {"sites[1].mask", "\"weird\""}},
    {"SiteUnknownKernel",
     [](json &m) { m["sites"][0]["kernel"] = "nope"; },
     KILN_FORMAT_ERROR,
     {"sites[0].kernel: no kernel named \"nope\""}},
    {"SiteKernelDtypeMismatch",
     [](json &m) { m["sites"][0]["dtype"] = "f16"; },
     KILN_FORMAT_ERROR,
     {"sites[0]", "disagree on dtype (f16 vs bf16)"}},
    {"SiteKernelHeadDimMismatch",
     [](json &m) { m["sites"][0]["head_dim"] = 128; },
     KILN_FORMAT_ERROR,
     {"disagree on head_dim (128 vs 64)"}},
    {"SiteKernelCausalMismatch",
     [](json &m) { m["sites"][0]["causal"] = false; },
     KILN_FORMAT_ERROR,
     {"disagree on causal"}},
    {"SiteKernelMaskMismatch",
     [](json &m) {
       m["sites"][0]["mask"] = "boolean";
       m["sites"][0]["mask_dtype"] = "i1";
     },
     KILN_FORMAT_ERROR,
     {"disagree on the mask"}},
    {"SiteWindowWithoutKernelArg",
     [](json &m) { m["sites"][0]["window"] = 128; },
     KILN_FORMAT_ERROR,
     {"no \"window\" argument"}},
    {"HeadsNotAMultiple",
     [](json &m) { m["sites"][0]["kv_heads"] = 3; },
     KILN_FORMAT_ERROR,
     {"q_heads (8) is not a multiple of kv_heads (3)"}},
    {"ScaleMissing",
     [](json &m) { m["sites"][0].erase("scale"); },
     KILN_FORMAT_ERROR,
     {"sites[0]: missing key \"scale\""}},
    {"UnknownLayout",
     [](json &m) { m["sites"][2]["layout"] = "sbhd"; },
     KILN_FORMAT_ERROR,
     {"sites[2].layout", "\"sbhd\""}},
    {"DuplicateSite",
     [](json &m) { m["sites"][1]["name"] = "attention_0"; },
     KILN_FORMAT_ERROR,
     {"duplicate site \"attention_0\""}},
    {"DuplicateKernel",
     [](json &m) { m["kernels"].push_back(m["kernels"][0]); },
     KILN_FORMAT_ERROR,
     {"duplicate kernel"}},
    {"SitesNotAnArray",
     [](json &m) {
       m["sites"] = {{"a", 1}};
     },
     KILN_FORMAT_ERROR,
     {"sites: expected an array, got object"}},
    {"TensorMapWithoutTargets",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2].erase("targets");
     },
     KILN_FORMAT_ERROR,
     {"tensor maps belong to kernels with \"targets\""}},
    {"TensorMapBoxTooNarrow",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["args"][22]["box"] = {32, 192};
     },
     KILN_FORMAT_ERROR,
     {"box[0]", "64 two-byte columns"}},
    {"TensorMapSwizzle",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["args"][23]["swizzle"] = 64;
     },
     KILN_FORMAT_ERROR,
     {"swizzle", "only the 128-byte swizzle"}},
    {"StagedMaskBoxNotItsRow",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["args"].push_back({{"name", "mask_map"},
                                          {"kind", "tensor_map"},
                                          {"tensor", "mask"},
                                          {"dtype", "i1"},
                                          {"box", {64, 1}},
                                          {"swizzle", 128}});
     },
     KILN_FORMAT_ERROR,
     {"box[0]", "is not the 128-byte swizzle"}},
    {"StagedBiasSwizzle",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["args"].push_back({{"name", "bias_map"},
                                          {"kind", "tensor_map"},
                                          {"tensor", "bias"},
                                          {"dtype", "bf16"},
                                          {"box", {16, 192}},
                                          {"swizzle", 32}});
     },
     KILN_FORMAT_ERROR,
     {"swizzle", "64 or 128 bytes"}},
    {"TensorMapKind",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["args"][24]["kind"] = "pointer";
     },
     KILN_FORMAT_ERROR,
     {"argument \"v_map\" must be \"tensor_map\""}},
    {"SiteKernelNotOnEveryTarget",
     [](json &m) {
       m = warpSpecializedManifest();
       m["sites"][0]["kernel"] = "kiln_attention_ws_bf16_d64_causal";
     },
     KILN_FORMAT_ERROR,
     {"not in every target's PTX"}},
    {"UnknownWarpSpecializedKernel",
     [](json &m) {
       m = warpSpecializedManifest();
       m["sites"][0]["warp_specialized_kernel"] = "kiln_attention_ws_nope";
     },
     KILN_FORMAT_ERROR,
     {"no kernel named \"kiln_attention_ws_nope\""}},
    {"WarpSpecializedKernelOfAnotherKind",
     [](json &m) {
       m = warpSpecializedManifest();
       m["kernels"][2]["causal"] = false;
     },
     KILN_FORMAT_ERROR,
     {"not a target-specific attention kernel"}},
    {"ScaleFactorOfUnknownKind",
     [](json &m) { m = scaleFactorManifest("per_query"); },
     KILN_FORMAT_ERROR,
     {"sites[1].scale_factor: expected true, false or \"per_head\", got "
      "\"per_query\""}},
    {"PerHeadScaleFactorWithoutTheKernelArgument",
     [](json &m) {
       m = scaleFactorManifest("per_head");
       m["kernels"][1]["args"].erase(m["kernels"][1]["args"].size() - 1);
     },
     KILN_FORMAT_ERROR,
     {"disagree on the run-time scale"}},
    {"WarpSpecializedKernelWithNegativeScale",
     [](json &m) {
       m = warpSpecializedManifest();
       m["sites"][0]["scale"] = -0.125;
     },
     KILN_FORMAT_ERROR,
     {"warp_specialized_kernel", "needs a positive scale"}},
};

INSTANTIATE_TEST_SUITE_P(
    Manifest, CorruptManifestTest, ::testing::ValuesIn(corruptions),
    [](const ::testing::TestParamInfo<Corruption> &info) {
      return std::string(info.param.name);
    });

} // namespace
