// A program that uses this project's full protobuf messages itself (as fp8-repro does) and emits
// an NVTX event: loading the agent into it must not register fp8audit/*.proto a second time.
#include <cstdio>

#include "fp8audit/nvtx_events.h"
#include "fp8audit/trace.pb.h"

int main() {
  fp8audit::v1::TraceRecord record;
  record.mutable_event()->set_kind(fp8audit::v1::UPDATE_FORWARD);
  std::printf("descriptor %s\n", record.GetDescriptor()->full_name().c_str());
  fp8audit::nvtx::UpdateForward();
  return 0;
}
