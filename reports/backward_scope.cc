#include "reports/backward_scope.h"

#include <algorithm>
#include <limits>
#include <string>

#include "fp8audit/nvtx_grammar.h"
#include "reports/event_text.h"

namespace fp8audit::reports {
namespace {

v1::Violation ScopeOpen(int32_t rank, uint64_t microbatch, std::string message) {
  v1::Violation v;
  v.set_kind(v1::Violation::BACKWARD_SCOPE_OPEN);
  v.set_rank(rank);
  v.set_microbatch(
      static_cast<uint32_t>(std::min<uint64_t>(microbatch, std::numeric_limits<uint32_t>::max())));
  v.set_message(std::move(message));
  return v;
}

}  // namespace

bool IsScopeExit(const v1::Event& event) {
  return event.kind() == v1::BACKWARD_SCOPE && event.context() == nvtx::kScopeExit;
}

void OpenScope::On(const v1::Event& event, uint32_t microbatch, const std::string& site) {
  if (event.kind() != v1::BACKWARD_SCOPE) return;
  if (event.context() == nvtx::kScopeEnter) {
    if (open_) return;  // the hook marks the outermost entry alone: a second one says nothing new
    open_ = true;
    microbatch_ = microbatch;
    site_ = Printable(site, 160);
  } else if (event.context() == nvtx::kScopeExit) {
    open_ = false;
  }
}

std::optional<v1::Violation> OpenScope::OpenViolation(int32_t rank, bool whole) const {
  if (!open_) return std::nullopt;
  std::string message = (rank >= 0 ? "rank " + std::to_string(rank) : std::string("this process")) +
                        ": quantization_backward_scope entered in microbatch " +
                        std::to_string(microbatch_);
  if (!site_.empty()) message += " at " + site_;
  message += whole ? " was never left by the end of the trace"
                   : " was still open when the trace ended (the process ended inside it)";
  message +=
      ": its backward update never ran there and this rank stops joining the amax all-reduce its "
      "peers still issue (a hang, or collectives paired wrongly); " +
      std::string(kScopeRemedy);
  return ScopeOpen(rank, microbatch_, std::move(message));
}

}  // namespace fp8audit::reports
