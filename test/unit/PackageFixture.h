//===- PackageFixture.h - Packages written to temporary directories -------===//
//
// Builds manifests in memory (as kilnc writes them) and writes them, with
// placeholder PTX files, into a fresh temporary directory per test.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_UNIT_PACKAGEFIXTURE_H
#define KILN_TEST_UNIT_PACKAGEFIXTURE_H

#include "kiln-c/Runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>

namespace kiln {
namespace test {

using json = nlohmann::json;

/// The argument list of an attention kernel, in the order kilnc emits it.
inline json attentionArgs(const std::string &dtype, bool mask,
                          const std::string &maskDtype, bool bias,
                          const char *dimKind = "i32",
                          const char *strideKind = "i64") {
  json args = json::array();
  for (const char *name : {"q", "k", "v", "out"})
    args.push_back({{"name", name}, {"kind", "pointer"}, {"dtype", dtype}});
  if (mask)
    args.push_back(
        {{"name", "mask"}, {"kind", "pointer"}, {"dtype", maskDtype}});
  if (bias)
    args.push_back({{"name", "bias"}, {"kind", "pointer"}, {"dtype", dtype}});
  for (const char *name : {"batch", "q_heads", "kv_heads", "q_len", "kv_len"})
    args.push_back({{"name", name}, {"kind", dimKind}});
  args.push_back({{"name", "scale"}, {"kind", "f32"}});
  for (const char *tensor : {"q", "k", "v", "out"})
    for (const char *axis : {"batch", "head", "seq"})
      args.push_back(
          {{"name", std::string(tensor) + "_stride_" + axis},
           {"kind", strideKind}});
  for (const auto &[tensor, present] :
       {std::pair<const char *, bool>{"mask", mask}, {"bias", bias}}) {
    if (!present)
      continue;
    for (const char *axis : {"batch", "head", "q", "k"})
      args.push_back(
          {{"name", std::string(tensor) + "_stride_" + axis},
           {"kind", strideKind}});
  }
  return args;
}

inline json attentionKernel(const std::string &name, const std::string &dtype,
                            int64_t headDim, bool causal,
                            const std::string &mask = "none",
                            const std::string &maskDtype = "") {
  bool hasMask = mask != "none";
  return {{"name", name},
          {"kind", "attention"},
          {"dtype", dtype},
          {"head_dim", headDim},
          {"causal", causal},
          {"window", nullptr},
          {"softcap", nullptr},
          {"mask", mask},
          {"mask_dtype", hasMask ? json(maskDtype) : json(nullptr)},
          {"bias", false},
          {"bias_dtype", nullptr},
          {"block", {128, 1, 1}},
          {"rows_per_block", 16},
          {"grid",
           {{{"dim", "q_len"}, {"ceil_div", 16}},
            {{"dim", "q_heads"}, {"ceil_div", 1}},
            {{"dim", "batch"}, {"ceil_div", 1}}}},
          {"static_shared_bytes", 41472},
          {"dynamic_shared_bytes", 0},
          {"args", attentionArgs(dtype, hasMask, maskDtype, false)}};
}

inline json attentionSite(const std::string &name, const std::string &kernel,
                          const std::string &dtype, int64_t headDim,
                          bool causal, json qHeads, json kvHeads,
                          const std::string &mask = "none",
                          const std::string &maskDtype = "",
                          const std::string &layout = "bhsd") {
  bool hasMask = mask != "none";
  return {{"name", name},
          {"kernel", kernel},
          {"function", "main"},
          {"location", "model.mlir:3:10"},
          {"layout", layout},
          {"dtype", dtype},
          {"scale", 0.125},
          {"causal", causal},
          {"window", nullptr},
          {"softcap", nullptr},
          {"batch", nullptr},
          {"q_heads", qHeads},
          {"kv_heads", kvHeads},
          {"q_len", nullptr},
          {"kv_len", nullptr},
          {"head_dim", headDim},
          {"mask", mask},
          {"mask_shape", hasMask ? json({nullptr, 1, nullptr, nullptr})
                                 : json(nullptr)},
          {"mask_dtype", hasMask ? json(maskDtype) : json(nullptr)},
          {"bias", false},
          {"bias_shape", nullptr}};
}

/// A valid package: a causal bf16 d64 kernel used by a GQA site (8/2 heads,
/// static) and a bshd site, and an f16 d128 kernel with an additive f32 mask
/// used by a site with dynamic heads.
inline json validManifest() {
  return {
      {"format", "kiln-package"},
      {"format_version", 1},
      {"producer", "kilnc 0.1.0"},
      {"source", "model.mlir"},
      {"targets",
       {{{"chip", "sm_90a"}, {"ptx", "kernels.sm_90a.ptx"}},
        {{"chip", "sm_80"}, {"ptx", "kernels.sm_80.ptx"}}}},
      {"kernels",
       {attentionKernel("kiln_attention_bf16_d64_causal", "bf16", 64, true),
        attentionKernel("kiln_attention_f16_d128_mask", "f16", 128, false,
                        "additive", "f32")}},
      {"sites",
       {attentionSite("attention_0", "kiln_attention_bf16_d64_causal", "bf16",
                      64, true, 8, 2),
        attentionSite("attention_1", "kiln_attention_f16_d128_mask", "f16",
                      128, false, nullptr, nullptr, "additive", "f32"),
        attentionSite("attention_2", "kiln_attention_bf16_d64_causal", "bf16",
                      64, true, 8, 2, "none", "", "bshd")}}};
}

/// The sm_90a-only warp-specialised kernel of bf16 d64 causal sites: 512
/// threads, 192 rows a block, the tensor maps last.
inline json warpSpecializedKernel() {
  json kernel =
      attentionKernel("kiln_attention_ws_bf16_d64_causal", "bf16", 64, true);
  kernel["targets"] = {"sm_90a"};
  kernel["block"] = {512, 1, 1};
  kernel["rows_per_block"] = 192;
  kernel["kv_block_size"] = 128;
  kernel["grid"][0]["ceil_div"] = 192;
  kernel["static_shared_bytes"] = 0;
  kernel["dynamic_shared_bytes"] = 90184;
  for (const auto &[name, tensor, rows] :
       {std::tuple{"q_map", "q", 192}, std::tuple{"k_map", "k", 128},
        std::tuple{"v_map", "v", 128}})
    kernel["args"].push_back({{"name", name},
                              {"kind", "tensor_map"},
                              {"tensor", tensor},
                              {"dtype", "bf16"},
                              {"box", {64, rows}},
                              {"swizzle", 128}});
  return kernel;
}

/// validManifest() with the warp-specialised kernel named on attention_0.
inline json warpSpecializedManifest() {
  json manifest = validManifest();
  manifest["kernels"].push_back(warpSpecializedKernel());
  manifest["sites"][0]["warp_specialized_kernel"] =
      "kiln_attention_ws_bf16_d64_causal";
  return manifest;
}

/// A fresh temporary directory per test, removed afterwards.
class PackageTest : public ::testing::Test {
protected:
  void SetUp() override {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") +
                          "/kiln-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    if (package)
      kiln_package_close(package);
    std::string command = "rm -rf '" + dir + "'";
    (void)std::system(command.c_str());
  }

  void writeFile(const std::string &name, const std::string &contents) {
    std::ofstream stream(dir + "/" + name, std::ios::binary);
    stream << contents;
    ASSERT_TRUE(stream.good()) << name;
  }

  /// Writes `manifest` and a placeholder PTX per target.
  void writePackage(const json &manifest) {
    writeFile("manifest.json", manifest.dump(2));
    if (manifest.is_object() && manifest.contains("targets") &&
        manifest["targets"].is_array())
      for (const json &target : manifest["targets"])
        if (target.is_object() && target.contains("ptx") &&
            target["ptx"].is_string())
          writeFile(target["ptx"].get<std::string>(),
                    "// placeholder PTX\n.version 8.0\n");
  }

  kiln_status open() { return kiln_package_open(dir.c_str(), &package); }

  /// Opens a valid package and returns the named site.
  const kiln_site *openSite(const char *name) {
    writePackage(validManifest());
    EXPECT_EQ(open(), KILN_OK) << kiln_last_error();
    const kiln_site *site = nullptr;
    EXPECT_EQ(kiln_package_find_site(package, name, &site), KILN_OK)
        << kiln_last_error();
    return site;
  }

  std::string dir;
  kiln_package *package = nullptr;
};

} // namespace test
} // namespace kiln

#endif // KILN_TEST_UNIT_PACKAGEFIXTURE_H
