// What `fp8audit --version` prints: the version, the commit it was built from, and the CUDA,
// CUPTI and PyTorch it was built with ("none" where built without them).
#pragma once

#include <string>

namespace fp8audit::cli {

std::string VersionText();

}  // namespace fp8audit::cli
