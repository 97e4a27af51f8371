//===- kiln-ptx-parts.cpp - Write a PTX file's per-kernel modules ---------===//
//
//   kiln-ptx-parts PTX -o DIR
//
// Writes DIR/<kernel>.ptx for each kernel entry of PTX: the module the
// runtime JIT-compiles when that kernel is first needed (its declarations
// and the entry). Prints one line per module, "<kernel> <bytes>"; exits 1
// where the runtime would load the PTX whole (the text not cut).
//
//===----------------------------------------------------------------------===//

#include "PtxParts.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 4 || std::string(argv[2]) != "-o") {
    std::cerr << "usage: kiln-ptx-parts PTX -o DIR\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "kiln-ptx-parts: cannot read " << argv[1] << "\n";
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string ptx = buffer.str();

  // The kernels are the entries the text declares, as a manifest names them.
  std::vector<std::string> kernels;
  std::regex entry(R"(\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*))");
  for (std::sregex_iterator it(ptx.begin(), ptx.end(), entry), end; it != end;
       ++it)
    kernels.push_back((*it)[1].str());

  kiln::rt::PtxParts parts = kiln::rt::splitPtxByKernel(ptx, kernels);
  if (!parts.cut || kernels.empty()) {
    std::cerr << "kiln-ptx-parts: " << argv[1]
              << " is loaded whole (not cut into " << kernels.size()
              << " modules)\n";
    return 1;
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::string path = std::string(argv[3]) + "/" + kernels[i] + ".ptx";
    std::ofstream out(path);
    out << parts.texts[parts.partOfKernel[i]];
    if (!out) {
      std::cerr << "kiln-ptx-parts: cannot write " << path << "\n";
      return 2;
    }
    std::cout << kernels[i] << " " << parts.texts[parts.partOfKernel[i]].size()
              << "\n";
  }
  return 0;
}
