//===- ManifestParser.cpp - Kiln package manifest parser ------------------===//
//
// Parses and validates manifest.json (format version 1): the package, its
// targets and its sites here, its kernels in ManifestKernel.cpp. Every error
// names the file and the JSON path of the offending key, e.g.
//   pkg/manifest.json: kernels[0].args[3].kind: expected one of "pointer",
//   "i32", "i64", "f32", got "u8"
//
//===----------------------------------------------------------------------===//

#include "ManifestParser.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

using json = nlohmann::json;

namespace kiln {
namespace rt {

namespace parser {

std::optional<Dim> parseDimName(const std::string &name) {
  for (int i = 0; i < kNumDims; ++i)
    if (name == dimName(static_cast<Dim>(i)))
      return static_cast<Dim>(i);
  return std::nullopt;
}

std::string typeName(const json &value) {
  if (value.is_number_integer())
    return "integer";
  if (value.is_number_float())
    return "number";
  return value.type_name();
}

kiln_dtype parseDtype(const Node &node, bool allowBool, bool allowFp8) {
  std::string name = allowBool  ? node.oneOf({"f16", "bf16", "f32", "i1"})
                     : allowFp8 ? node.oneOf({"f16", "bf16", "f32", "f8e4m3"})
                                : node.oneOf({"f16", "bf16", "f32"});
  if (name == "f16")
    return KILN_DTYPE_F16;
  if (name == "bf16")
    return KILN_DTYPE_BF16;
  if (name == "f32")
    return KILN_DTYPE_F32;
  if (name == "f8e4m3")
    return KILN_DTYPE_F8E4M3;
  return KILN_DTYPE_BOOL;
}

kiln_dtype parseOptionalDtype(const Node &node, bool allowBool, bool allowFp8) {
  if (node.isNull())
    return KILN_DTYPE_NONE;
  return parseDtype(node, allowBool, allowFp8);
}

kiln_dtype parseCacheDtype(const Node &object, kiln_dtype dtype,
                           const std::string &owner) {
  Node node = object.optionalKey("cache_dtype");
  if (node.isNull())
    return dtype;
  std::string name = node.string();
  kiln_dtype cacheDtype = name == "f8e4m3" ? KILN_DTYPE_F8E4M3 : dtype;
  if (cacheDtype == KILN_DTYPE_F8E4M3) {
    if (dtype != KILN_DTYPE_F16 && dtype != KILN_DTYPE_BF16)
      node.fail(fmt::format("{}f8e4m3 caches take f16 or bf16 queries; the "
                            "\"dtype\" is {}",
                            owner, dtypeName(dtype)));
  } else if (name != dtypeName(dtype)) {
    node.fail(fmt::format("{}expected \"f8e4m3\" or the \"dtype\" (\"{}\"), "
                          "got \"{}\"",
                          owner, dtypeName(dtype), name));
  }
  return cacheDtype;
}

/// Reads "mask" and "mask_dtype" of a kernel or site and checks they agree.
void parseMask(const Node &object, kiln_mask_kind &kind, kiln_dtype &dtype) {
  Node maskNode = object.key("mask");
  std::string mask = maskNode.oneOf({"none", "additive", "boolean"});
  Node dtypeNode = object.optionalKey("mask_dtype");
  dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/true);
  if (mask == "none") {
    kind = KILN_MASK_NONE;
    if (dtype != KILN_DTYPE_NONE)
      dtypeNode.fail("must be null when \"mask\" is \"none\"");
  } else if (mask == "additive") {
    kind = KILN_MASK_ADDITIVE;
    if (dtype == KILN_DTYPE_NONE || dtype == KILN_DTYPE_BOOL)
      dtypeNode.fail("an additive mask needs a float dtype (f16, bf16, f32)");
  } else {
    kind = KILN_MASK_BOOLEAN;
    if (dtype == KILN_DTYPE_NONE)
      dtype = KILN_DTYPE_BOOL;
    if (dtype != KILN_DTYPE_BOOL)
      dtypeNode.fail("a boolean mask has dtype \"i1\"");
  }
}

void parseBias(const Node &object, bool &bias, kiln_dtype &dtype) {
  Node biasNode = object.optionalKey("bias");
  bias = biasNode.isNull() ? false : biasNode.boolean();
  Node dtypeNode = object.optionalKey("bias_dtype");
  dtype = parseOptionalDtype(dtypeNode, /*allowBool=*/false);
  if (!bias && dtype != KILN_DTYPE_NONE)
    dtypeNode.fail("must be null when \"bias\" is false");
}

} // namespace parser

using namespace parser;

namespace {

/// Reads a site's "cache_dtype" and "kv_scales" (absent: the site's dtype
/// and none, as in packages written before FP8 caches): an f8e4m3 cache of
/// a paged site has scales per tensor or per KV head, a float cache none.
void parseKvCache(const Node &node, Site &site) {
  const std::string owner = fmt::format("site \"{}\": ", site.name);
  site.cacheDtype = parseCacheDtype(node, site.dtype, owner);
  bool fp8 = site.cacheDtype == KILN_DTYPE_F8E4M3;
  if (fp8 && !site.paged)
    node.key("cache_dtype")
        .fail(fmt::format("{}only paged sites have f8e4m3 caches", owner));
  Node scalesNode = node.optionalKey("kv_scales");
  if (!scalesNode.isNull()) {
    std::string scales = scalesNode.string();
    if (scales != "per_tensor" && scales != "per_kv_head")
      scalesNode.fail(fmt::format("{}expected \"per_tensor\", "
                                  "\"per_kv_head\" or null, got \"{}\"",
                                  owner, scales));
    site.kvScales =
        scales == "per_tensor" ? KvScales::PerTensor : KvScales::PerKvHead;
  }
  if (fp8 && site.kvScales == KvScales::None)
    scalesNode.fail(fmt::format("{}f8e4m3 caches need scales (expected "
                                "\"per_tensor\" or \"per_kv_head\", got "
                                "null)",
                                owner));
  if (!fp8 && site.kvScales != KvScales::None)
    scalesNode.fail(fmt::format("{}scales are for f8e4m3 caches; the site's "
                                "caches hold {} (expected null)",
                                owner, dtypeName(site.cacheDtype)));
}

/// The index of the kernel `nameNode` names (names are unique); fails on
/// the node where there is none.
static size_t namedKernel(const Node &nameNode,
                          const std::vector<Kernel> &kernels) {
  std::string name = nameNode.string();
  for (size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i].name == name)
      return i;
  nameNode.fail(fmt::format("no kernel named \"{}\"", name));
}

void parseSite(const Node &node, const std::vector<Kernel> &kernels,
               Site &site) {
  site.name = node.key("name").string();
  if (site.name.empty())
    node.key("name").fail("must not be empty");
  Node kernelNode = node.key("kernel");
  site.kernelName = kernelNode.string();
  site.kernelIndex = namedKernel(kernelNode, kernels);
  const Kernel &kernel = kernels[site.kernelIndex];
  if (kernel.combine)
    kernelNode.fail(fmt::format(
        "kernel \"{}\" is a split-KV combine kernel, not an attention kernel",
        site.kernelName));
  if (kernel.append)
    kernelNode.fail(fmt::format(
        "kernel \"{}\" is a paged-append kernel, not an attention kernel",
        site.kernelName));
  if (!kernel.targets.empty())
    kernelNode.fail(fmt::format(
        "kernel \"{}\" is not in every target's PTX; a site's kernel must be",
        site.kernelName));
  Node wsNode = node.optionalKey("warp_specialized_kernel");
  if (!wsNode.isNull()) {
    std::string wsName = wsNode.string();
    site.warpSpecializedIndex = namedKernel(wsNode, kernels);
    const Kernel &ws = kernels[*site.warpSpecializedIndex];
    if (ws.kind != "attention" || ws.combineIndex || ws.targets.empty() ||
        ws.headDim != kernel.headDim ||
        ws.valueHeadDim != kernel.valueHeadDim || ws.dtype != kernel.dtype ||
        ws.causal != kernel.causal)
      wsNode.fail(fmt::format("kernel \"{}\" is not a target-specific "
                              "attention kernel of the site's kind",
                              wsName));
  }

  Node function = node.optionalKey("function");
  site.function = function.isNull() ? "" : function.string();
  Node location = node.optionalKey("location");
  site.location = location.isNull() ? "" : location.string();
  Node layoutNode = node.optionalKey("layout");
  std::string layout =
      layoutNode.isNull() ? "bhsd" : layoutNode.oneOf({"bhsd", "bshd"});
  site.layout = layout == "bhsd" ? KILN_LAYOUT_BHSD : KILN_LAYOUT_BSHD;
  Node dtypeNode = node.key("dtype");
  site.dtype = parseDtype(dtypeNode, /*allowBool=*/false);
  Node scaleNode = node.key("scale");
  double scale = scaleNode.number();
  if (!std::isfinite(scale))
    scaleNode.fail("must be finite");
  site.scale = static_cast<float>(scale);
  // The warp-specialised kernels fold the scale into their exponents' FMAs,
  // which takes a positive one (kilnc never pairs them otherwise).
  if (site.warpSpecializedIndex && !(site.scale > 0.0f))
    // Six decimals ({:f}), the form this message has always had.
    wsNode.fail(fmt::format("a warp-specialised kernel needs a positive "
                            "scale; the site's is {:f}",
                            site.scale));
  Node causalNode = node.optionalKey("causal");
  site.causal = causalNode.isNull() ? false : causalNode.boolean();
  site.window = node.optionalKey("window").optionalInteger(1);
  Node kindNode = node.optionalKey("kind");
  std::string kind =
      kindNode.isNull()
          ? "attention"
          : kindNode.oneOf({"attention", "paged_attention", "attention_grad"});
  site.paged = kind == "paged_attention";
  // A backward site: its kernel is the query pass, "key_pass" the key pass.
  bool grad = kind == "attention_grad";
  if (grad != (kernel.kind == "attention_grad_q"))
    kernelNode.fail(fmt::format(
        "site \"{}\" is {} but its kernel \"{}\" is a \"{}\" kernel",
        site.name, grad ? "a backward site" : "not a backward site",
        kernel.name, kernel.kind));
  if (grad) {
    Node keyPassNode = node.key("key_pass");
    std::string keyPass = keyPassNode.string();
    site.keyPassIndex = namedKernel(keyPassNode, kernels);
    const Kernel &keys = kernels[*site.keyPassIndex];
    if (keys.kind != "attention_grad_kv" || keys.dtype != kernel.dtype ||
        keys.headDim != kernel.headDim ||
        keys.valueHeadDim != kernel.valueHeadDim)
      keyPassNode.fail(fmt::format("kernel \"{}\" is not the key pass of "
                                   "kernel \"{}\"",
                                   keyPass, kernel.name));
  }
  // The log-sum-exp: written by a forward that trains, read by a backward.
  Node lseNode = node.optionalKey("lse");
  site.lse = grad || (!lseNode.isNull() && lseNode.boolean());
  bool kernelLse = std::any_of(
      kernel.args.begin(), kernel.args.end(),
      [](const KernelArg &arg) { return arg.source == ArgSource::Lse; });
  if (site.lse != kernelLse)
    node.fail(fmt::format("site \"{}\" {} the log-sum-exp but its kernel "
                          "\"{}\" {}",
                          site.name, site.lse ? "keeps" : "does not keep",
                          kernel.name, kernelLse ? "writes it" : "does not"));
  if (site.paged != kernel.paged)
    node.fail(fmt::format("site \"{}\" is {} but its kernel \"{}\" is {}",
                          site.name, site.paged ? "paged" : "not paged",
                          kernel.name, kernel.paged ? "paged" : "not"));
  if (site.paged)
    site.pageSize = node.optionalKey("page_size").optionalInteger(1);
  // Packed queries are the kernel's form: the site takes them with it.
  site.ragged = kernel.ragged;
  parseKvCache(node, site);
  Node softcapNode = node.optionalKey("softcap");
  if (!softcapNode.isNull()) {
    double softcap = softcapNode.number();
    if (!(softcap > 0) || !std::isfinite(softcap))
      softcapNode.fail("must be a positive number");
    site.softcap = static_cast<float>(softcap);
  }
  for (int i = 0; i < kNumDims; ++i) {
    Dim dim = static_cast<Dim>(i);
    site.dims[i] = node.optionalKey(dimName(dim)).optionalInteger(1);
  }
  Node valueHeadDimNode = node.optionalKey("v_head_dim");
  site.valueHeadDim = valueHeadDimNode.isNull()
                          ? site.dims[static_cast<int>(Dim::HeadDim)]
                          : valueHeadDimNode.optionalInteger(1);
  parseMask(node, site.mask, site.maskDtype);
  parseBias(node, site.bias, site.biasDtype);
  // A run-time scale: `true` (one f32) or "per_head" (one a query head).
  Node factorNode = node.optionalKey("scale_factor");
  if (factorNode.raw().is_string()) {
    if (factorNode.string() != "per_head")
      factorNode.fail(fmt::format("expected true, false or \"per_head\", "
                                  "got \"{}\"",
                                  factorNode.string()));
    site.scaleFactor = site.scaleFactorPerHead = true;
  } else {
    site.scaleFactor = !factorNode.isNull() && factorNode.boolean();
  }

  // The site must be launchable with its kernel.
  auto mismatch = [&](const std::string &what) {
    node.fail(fmt::format("site \"{}\" and its kernel \"{}\" disagree on {}",
                          site.name, kernel.name, what));
  };
  if (site.dtype != kernel.dtype)
    mismatch(fmt::format("dtype ({} vs {})", dtypeName(site.dtype),
                         dtypeName(kernel.dtype)));
  if (site.cacheDtype != kernel.cacheDtype)
    mismatch(fmt::format("cache_dtype ({} vs {})", dtypeName(site.cacheDtype),
                         dtypeName(kernel.cacheDtype)));
  const auto &headDim = site.dims[static_cast<int>(Dim::HeadDim)];
  if (kernel.headDim && headDim && *kernel.headDim != *headDim)
    mismatch(fmt::format("head_dim ({} vs {})", *headDim, *kernel.headDim));
  if (site.causal != kernel.causal)
    mismatch("causal");
  if (site.mask != kernel.mask || site.maskDtype != kernel.maskDtype)
    mismatch("the mask");
  if (site.bias != kernel.bias || site.biasDtype != kernel.biasDtype)
    mismatch("the bias");
  if (site.scaleFactor !=
      std::any_of(kernel.args.begin(), kernel.args.end(),
                  [](const KernelArg &arg) {
                    return arg.source == ArgSource::ScaleFactor;
                  }))
    mismatch("the run-time scale (the site's scale_factor, the kernel's "
             "scale_factor argument)");
  auto hasArg = [&](ArgSource source) {
    for (const KernelArg &arg : kernel.args)
      if (arg.source == source)
        return true;
    return false;
  };
  // A window or softcap is either compiled into the kernel (and then must be
  // the site's) or passed as an argument.
  if (!hasArg(ArgSource::Window) && site.window != kernel.window)
    mismatch("the window (the kernel has it compiled in and takes no "
             "\"window\" argument)");
  if (!hasArg(ArgSource::Softcap) && site.softcap != kernel.softcap)
    mismatch("softcap (the kernel has it compiled in and takes no "
             "\"softcap\" argument)");
  const auto &qHeads = site.dims[static_cast<int>(Dim::QHeads)];
  const auto &kvHeads = site.dims[static_cast<int>(Dim::KvHeads)];
  if (qHeads && kvHeads && *qHeads % *kvHeads != 0)
    node.fail(fmt::format("q_heads ({}) is not a multiple of kv_heads ({})",
                          *qHeads, *kvHeads));
}

bool parseChip(const std::string &chip, int &version, bool &archSpecific) {
  if (chip.size() < 5 || chip.compare(0, 3, "sm_") != 0)
    return false;
  size_t end = chip.size();
  archSpecific = chip.back() == 'a';
  if (archSpecific)
    --end;
  if (end <= 3 || end - 3 > 4)
    return false;
  version = 0;
  for (size_t i = 3; i < end; ++i) {
    if (chip[i] < '0' || chip[i] > '9')
      return false;
    version = version * 10 + (chip[i] - '0');
  }
  return version >= 10;
}

Error readFile(const std::string &path, std::string &contents,
               const std::string &what) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    int err = errno;
    return {err == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
            fmt::format("{} {}: {}", what, path, std::strerror(err))};
  }
  if (S_ISDIR(info.st_mode))
    return {KILN_IO_ERROR, fmt::format("{} {} is a directory", what, path)};
  std::ifstream stream(path, std::ios::binary);
  if (!stream)
    return {KILN_IO_ERROR, fmt::format("cannot open {} {}: {}", what, path,
                                       std::strerror(errno))};
  std::ostringstream buffer;
  buffer << stream.rdbuf();
  if (stream.bad())
    return {KILN_IO_ERROR, fmt::format("cannot read {} {}", what, path)};
  contents = buffer.str();
  return Error::ok();
}

std::string joinPath(const std::string &directory, const std::string &file) {
  if (directory.empty() || directory.back() == '/')
    return directory + file;
  return directory + "/" + file;
}

} // namespace

Error parseManifest(const std::string &text, const std::string &directory,
                    bool readPtx, Manifest &manifest) {
  std::string file = joinPath(directory, "manifest.json");
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error &error) {
    // nlohmann's message already says where ("at line 3, column 5").
    std::string what = error.what();
    size_t colon = what.find("]: ");
    return {KILN_FORMAT_ERROR,
            fmt::format("{}: not valid JSON: {}", file,
                        colon == std::string::npos ? what
                                                   : what.substr(colon + 3))};
  }
  try {
    Node top(root, "", file);
    if (!root.is_object())
      top.fail(fmt::format("expected a JSON object at the top level, got {}",
                           typeName(root)));
    Node formatNode = top.key("format");
    if (formatNode.string() != "kiln-package")
      formatNode.fail(fmt::format("expected \"kiln-package\", got \"{}\"",
                                  formatNode.string()));
    Node versionNode = top.key("format_version");
    int64_t version = versionNode.integer();
    if (version != KILN_MANIFEST_FORMAT_VERSION)
      versionNode.fail(fmt::format("format version {} is not supported (this "
                                   "runtime reads version {})",
                                   version, KILN_MANIFEST_FORMAT_VERSION),
                       KILN_UNSUPPORTED);
    manifest.directory = directory;
    Node producer = top.optionalKey("producer");
    manifest.producer = producer.isNull() ? "" : producer.string();
    Node source = top.optionalKey("source");
    manifest.source = source.isNull() ? "" : source.string();

    Node targetsNode = top.key("targets");
    std::vector<Node> targets = targetsNode.array();
    if (targets.empty())
      targetsNode.fail("a package needs at least one target");
    for (const Node &targetNode : targets) {
      Target target;
      Node chipNode = targetNode.key("chip");
      target.chip = chipNode.string();
      if (!parseChip(target.chip, target.smVersion, target.archSpecific))
        chipNode.fail(fmt::format(
            "expected a chip like \"sm_90a\" or \"sm_80\", got \"{}\"",
            target.chip));
      for (const Target &other : manifest.targets)
        if (other.chip == target.chip)
          chipNode.fail(fmt::format("duplicate target \"{}\"", target.chip));
      Node gridDependency = targetNode.optionalKey("grid_dependency");
      target.gridDependency =
          !gridDependency.isNull() && gridDependency.boolean();
      Node attentionGridDependency =
          targetNode.optionalKey("attention_grid_dependency");
      target.attentionGridDependency = !attentionGridDependency.isNull() &&
                                       attentionGridDependency.boolean();
      Node clusterSplits = targetNode.optionalKey("cluster_splits");
      if (!clusterSplits.isNull())
        target.clusterSplits = clusterSplits.integer(2, 16);
      Node ptxNode = targetNode.key("ptx");
      target.ptxFile = ptxNode.string();
      if (target.ptxFile.empty() || target.ptxFile.find('/') == 0)
        ptxNode.fail("expected a file name relative to the package");
      if (readPtx) {
        std::string path = joinPath(directory, target.ptxFile);
        if (Error error = readFile(path, target.ptx, "PTX file"))
          ptxNode.fail(error.message, error.status);
      }
      manifest.targets.push_back(std::move(target));
    }

    Node kernelsNode = top.key("kernels");
    for (const Node &kernelNode : kernelsNode.array()) {
      Kernel kernel;
      parseKernel(kernelNode, kernel);
      for (const Kernel &other : manifest.kernels)
        if (other.name == kernel.name)
          kernelNode.key("name").fail(
              fmt::format("duplicate kernel \"{}\"", kernel.name));
      manifest.kernels.push_back(std::move(kernel));
    }
    resolveCombineKernels(kernelsNode, manifest.kernels);
    Node sitesNode = top.key("sites");
    for (const Node &siteNode : sitesNode.array()) {
      Site site;
      parseSite(siteNode, manifest.kernels, site);
      for (const Site &other : manifest.sites)
        if (other.name == site.name)
          siteNode.key("name").fail(
              fmt::format("duplicate site \"{}\"", site.name));
      manifest.sites.push_back(std::move(site));
    }
  } catch (const ParseFailure &failure) {
    return {failure.status, failure.message};
  } catch (const json::exception &error) {
    return {KILN_FORMAT_ERROR, fmt::format("{}: {}", file, error.what())};
  }
  return Error::ok();
}

Error loadManifest(const std::string &directory, Manifest &manifest) {
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0) {
    int err = errno;
    return {
        err == ENOENT ? KILN_NOT_FOUND : KILN_IO_ERROR,
        fmt::format("package directory {}: {}", directory, std::strerror(err))};
  }
  if (!S_ISDIR(info.st_mode))
    return {KILN_IO_ERROR,
            fmt::format("package path {} is not a directory", directory)};
  std::string text;
  if (Error error =
          readFile(joinPath(directory, "manifest.json"), text, "manifest"))
    return error;
  return parseManifest(text, directory, /*readPtx=*/true, manifest);
}

} // namespace rt
} // namespace kiln
