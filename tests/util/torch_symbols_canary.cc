// A program linked with libtorch that uses std::filesystem, built on purpose: the
// TorchLinkedBinaries check must flag it (TorchLinkedBinaries.FlagsAFilesystemCallNextToTorch).
// Built into its own folder, which the check over the build tree leaves out. Never run.
#include <c10/core/CPUAllocator.h>

#include <filesystem>

int main(int argc, char** argv) {
  if (argc > 1) std::filesystem::remove_all(argv[1]);
  return c10::GetCPUAllocator() != nullptr ? 0 : 1;
}
