//===- PtxParts.cpp - A package's PTX cut into one module per kernel ------===//

#include "PtxParts.h"

#include <cctype>
#include <map>
#include <optional>

namespace kiln {
namespace rt {
namespace {

/// Reads PTX text past whitespace and comments, a token at a time.
class PtxCursor {
public:
  explicit PtxCursor(const std::string &text) : text(text) {}

  size_t position() const { return at; }
  bool atEnd() const { return at >= text.size(); }
  /// False once a comment or string ran past the end of the text.
  bool wellFormed() const { return !broken; }

  /// Moves past whitespace and comments.
  void skipSpace() {
    while (at < text.size()) {
      char c = text[at];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++at;
      } else if (text.compare(at, 2, "//") == 0) {
        size_t end = text.find('\n', at);
        at = end == std::string::npos ? text.size() : end + 1;
      } else if (text.compare(at, 2, "/*") == 0) {
        size_t end = text.find("*/", at + 2);
        if (end == std::string::npos) {
          broken = true;
          at = text.size();
        } else {
          at = end + 2;
        }
      } else {
        return;
      }
    }
  }

  /// The token at the cursor (after skipSpace): one punctuation character,
  /// a quoted string, or a run of anything else; the cursor moves past it.
  std::string next() {
    skipSpace();
    if (atEnd())
      return {};
    size_t begin = at;
    char c = text[at];
    if (isPunctuation(c)) {
      ++at;
    } else if (c == '"') {
      size_t end = text.find('"', at + 1);
      if (end == std::string::npos) {
        broken = true;
        at = text.size();
      } else {
        at = end + 1;
      }
    } else {
      while (at < text.size() && !isPunctuation(text[at]) &&
             !std::isspace(static_cast<unsigned char>(text[at])) &&
             text.compare(at, 2, "//") != 0 && text.compare(at, 2, "/*") != 0)
        ++at;
    }
    return text.substr(begin, at - begin);
  }

  /// Moves to the start of the next line.
  void skipLine() {
    size_t end = text.find('\n', at);
    at = end == std::string::npos ? text.size() : end + 1;
  }

private:
  static bool isPunctuation(char c) {
    return c == '{' || c == '}' || c == '(' || c == ')' || c == ';' ||
           c == ',' || c == '=' || c == '"';
  }

  const std::string &text;
  size_t at = 0;
  bool broken = false;
};

/// A top-level statement of the PTX: its text (with the comments before
/// it), and the kernel it defines, if it is an entry.
struct PtxStatement {
  size_t begin = 0, end = 0;
  std::optional<std::string> entry;
};

/// The module's top-level statements, or nothing where the text does not
/// read as PTX the runtime knows how to cut.
std::optional<std::vector<PtxStatement>> statementsOf(const std::string &ptx) {
  std::vector<PtxStatement> statements;
  PtxCursor cursor(ptx);
  while (true) {
    PtxStatement statement;
    statement.begin = cursor.position();
    cursor.skipSpace();
    if (cursor.atEnd())
      break;
    std::string first = cursor.next();
    // Module directives end with their line.
    if (first == ".version" || first == ".target" ||
        first == ".address_size" || first == ".file") {
      cursor.skipLine();
      statement.end = cursor.position();
      statements.push_back(statement);
      continue;
    }
    int depth = 0;
    bool headerDone = false, sawEntry = false;
    std::string token = first;
    while (true) {
      if (token.empty())
        return std::nullopt; // the text ended inside a statement
      if (!headerDone && sawEntry && !statement.entry)
        statement.entry = token;
      if (!headerDone && token == ".entry")
        sawEntry = true;
      if (token == "(" || token == "{" || token == ";" || token == "=")
        headerDone = true;
      if (token == "{") {
        ++depth;
      } else if (token == "}") {
        if (--depth < 0)
          return std::nullopt;
        if (depth == 0) {
          // A function's body ends the statement; an initializer's brace is
          // followed by its semicolon.
          size_t after = cursor.position();
          cursor.skipSpace();
          bool initializer = !cursor.atEnd() && ptx[cursor.position()] == ';';
          if (!initializer) {
            statement.end = after;
            break;
          }
        }
      } else if (token == ";" && depth == 0) {
        statement.end = cursor.position();
        break;
      }
      token = cursor.next();
    }
    if (!cursor.wellFormed())
      return std::nullopt;
    statements.push_back(statement);
  }
  if (!cursor.wellFormed())
    return std::nullopt;
  return statements;
}

} // namespace

PtxParts splitPtxByKernel(const std::string &ptx,
                          const std::vector<std::string> &kernels) {
  PtxParts whole;
  whole.texts.push_back(ptx);
  whole.partOfKernel.assign(kernels.size(), 0);
  std::optional<std::vector<PtxStatement>> statements = statementsOf(ptx);
  if (!statements)
    return whole;

  std::string declarations;
  std::map<std::string, std::string> entries;
  for (const PtxStatement &statement : *statements) {
    std::string text = ptx.substr(statement.begin, statement.end - statement.begin);
    if (statement.entry) {
      if (!entries.emplace(*statement.entry, std::move(text)).second)
        return whole; // two entries of one name
    } else {
      declarations += text;
    }
  }

  PtxParts parts;
  parts.cut = true;
  std::map<std::string, size_t> partOfName;
  for (const std::string &kernel : kernels) {
    auto known = partOfName.find(kernel);
    if (known != partOfName.end()) {
      parts.partOfKernel.push_back(known->second);
      continue;
    }
    auto entry = entries.find(kernel);
    if (entry == entries.end())
      return whole;
    partOfName[kernel] = parts.texts.size();
    parts.partOfKernel.push_back(parts.texts.size());
    parts.texts.push_back(declarations + "\n" + entry->second + "\n");
  }
  return parts;
}

} // namespace rt
} // namespace kiln
