//===- ManifestParser.h - Pieces of the manifest parser ---------*- C++ -*-===//
//
// What the parts of the manifest parser (ManifestParser.cpp for the package,
// its targets and sites; ManifestKernel.cpp for its kernels) share: typed
// access to JSON nodes that fails with the file and the JSON path of the
// node, and the readers of fields kernels and sites both have.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_RUNTIME_MANIFESTPARSER_H
#define KILN_LIB_RUNTIME_MANIFESTPARSER_H

#include "Manifest.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {
namespace rt {
namespace parser {

/// "integer", "number", or nlohmann's name of `value`'s type.
std::string typeName(const nlohmann::json &value);

/// Thrown inside the parser only; converted to an Error at its entry point.
struct ParseFailure {
  kiln_status status;
  std::string message;
};

/// Typed access to a JSON node that knows its path for messages.
class Node {
public:
  Node(const nlohmann::json &value, std::string path, const std::string &file)
      : value(value), path(std::move(path)), file(file) {}

  [[noreturn]] void fail(const std::string &what,
                         kiln_status status = KILN_FORMAT_ERROR) const {
    throw ParseFailure{status, fmt::format("{}: {}{}{}", file, path,
                                           path.empty() ? "" : ": ", what)};
  }

  /// The path of the key `name` of this node.
  std::string childPath(const std::string &name) const {
    return path.empty() ? name : fmt::format("{}.{}", path, name);
  }

  const nlohmann::json &raw() const { return value; }
  bool isNull() const { return value.is_null(); }

  Node key(const std::string &name) const {
    if (!value.is_object())
      fail(fmt::format("expected an object, got {}", typeName(value)));
    auto it = value.find(name);
    if (it == value.end())
      fail(fmt::format("missing key \"{}\"", name));
    return Node(*it, childPath(name), file);
  }
  bool has(const std::string &name) const {
    return value.is_object() && value.contains(name);
  }
  /// The key's node, or a null node when absent.
  Node optionalKey(const std::string &name) const {
    static const nlohmann::json null;
    if (has(name))
      return key(name);
    return Node(null, childPath(name), file);
  }

  std::vector<Node> array() const {
    if (!value.is_array())
      fail(fmt::format("expected an array, got {}", typeName(value)));
    std::vector<Node> items;
    for (size_t i = 0; i < value.size(); ++i)
      items.emplace_back(value[i], fmt::format("{}[{}]", path, i), file);
    return items;
  }
  std::string string() const {
    if (!value.is_string())
      fail(fmt::format("expected a string, got {}", typeName(value)));
    return value.get<std::string>();
  }
  bool boolean() const {
    if (!value.is_boolean())
      fail(fmt::format("expected a boolean, got {}", typeName(value)));
    return value.get<bool>();
  }
  int64_t integer(int64_t min = INT64_MIN, int64_t max = INT64_MAX) const {
    if (!value.is_number_integer())
      fail(fmt::format("expected an integer, got {}", typeName(value)));
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("integer out of range");
    int64_t result = value.get<int64_t>();
    if (result < min || result > max)
      fail(fmt::format("expected an integer in [{}, {}], got {}", min, max,
                       result));
    return result;
  }
  double number() const {
    if (!value.is_number())
      fail(fmt::format("expected a number, got {}", typeName(value)));
    return value.get<double>();
  }
  std::optional<int64_t> optionalInteger(int64_t min = INT64_MIN) const {
    if (value.is_null())
      return std::nullopt;
    return integer(min);
  }
  /// One of `choices`; the message lists them.
  std::string oneOf(std::initializer_list<const char *> choices) const {
    std::string got = string();
    std::string list;
    for (const char *choice : choices) {
      if (got == choice)
        return got;
      fmt::format_to(std::back_inserter(list), "{}\"{}\"",
                     list.empty() ? "" : ", ", choice);
    }
    fail(fmt::format("expected one of {}, got \"{}\"", list, got));
  }

  const nlohmann::json &value;
  std::string path;
  const std::string &file;
};

/// The dimension named `name` ("batch", "q_heads", ...), if any.
std::optional<Dim> parseDimName(const std::string &name);

/// A dtype name: "f16", "bf16", "f32", with `allowBool` "i1", and with
/// `allowFp8` "f8e4m3" (a KV cache's element).
kiln_dtype parseDtype(const Node &node, bool allowBool, bool allowFp8 = false);
/// The same, or KILN_DTYPE_NONE for a null node.
kiln_dtype parseOptionalDtype(const Node &node, bool allowBool,
                              bool allowFp8 = false);
/// A paged or append kernel's or a paged site's "cache_dtype" (`object`'s
/// key): `dtype` when absent, else `dtype` itself or "f8e4m3" (which needs
/// f16 or bf16 queries). `owner` starts the messages (`site "name": `).
kiln_dtype parseCacheDtype(const Node &object, kiln_dtype dtype,
                           const std::string &owner = "");

/// Reads "mask" and "mask_dtype" of a kernel or site and checks they agree.
void parseMask(const Node &object, kiln_mask_kind &kind, kiln_dtype &dtype);
/// Reads "bias" and "bias_dtype" of a kernel or site.
void parseBias(const Node &object, bool &bias, kiln_dtype &dtype);

/// Reads one entry of "kernels" (its split_combine kernel is resolved by
/// resolveCombineKernels once all are read).
void parseKernel(const Node &node, Kernel &kernel);

/// Points each kernel that splits keys at its combine kernel, which must
/// reduce outputs of the same dtype and value head dim.
void resolveCombineKernels(const Node &kernelsNode,
                           std::vector<Kernel> &kernels);

} // namespace parser
} // namespace rt
} // namespace kiln

#endif // KILN_LIB_RUNTIME_MANIFESTPARSER_H
