// agent_trace_events TRACE...: one JSON line per record of each trace (header, every event,
// footer), for scripts that compare what each probe saw (tests/live_te/probes_compare.py).
//   {"header": {"pid": P, "probe_mode": "auto", "probes": ["te-call", ...], "gpu": "...",
//               "cupti": "..."}}
//   {"kind": "UPDATE_FORWARD", "source": "TE_CALL", "pass": "FORWARD", "count": 1, "thread": T,
//    "tensors": N, "te_version": "", "probes": [...], "detail": "..."}
//   {"footer": {"events": E, "dropped": D, "kernel_launches": L}}
// Exit 2 when a trace cannot be read (one line on stderr).
#include <cstdio>
#include <string>

#include "tests/agent/agent_test_util.h"

namespace t = fp8audit::agent::testing;
namespace v1 = ::fp8audit::v1;

namespace {

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

template <typename List>
std::string Strings(const List& list) {
  std::string out = "[";
  for (const auto& s : list) out += (out.size() > 1 ? ", " : "") + Json(s);
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: agent_trace_events TRACE...\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    const t::Trace trace = t::ReadTrace(argv[i]);
    if (trace.damaged && trace.events.empty() && !trace.has_footer) {
      std::fprintf(stderr, "agent_trace_events: %s: %s\n", argv[i], trace.damage.c_str());
      return 2;
    }
    const v1::TraceHeader& h = trace.header;
    std::printf(
        "{\"header\": {\"path\": %s, \"pid\": %u, \"probe_mode\": %s, \"probes\": %s, "
        "\"gpu\": %s, \"cupti\": %s}}\n",
        Json(argv[i]).c_str(), h.pid(), Json(h.probe_mode()).c_str(), Strings(h.probes()).c_str(),
        Json(h.gpu()).c_str(), Json(h.cupti()).c_str());
    for (const v1::Event& e : trace.events) {
      std::printf(
          "{\"kind\": %s, \"source\": %s, \"pass\": %s, \"count\": %llu, \"thread\": %llu, "
          "\"tensors\": %u, \"te_version\": %s, \"probes\": %s, \"detail\": %s}\n",
          Json(v1::EventKind_Name(e.kind())).c_str(), Json(v1::Source_Name(e.source())).c_str(),
          Json(v1::Pass_Name(e.pass())).c_str(), static_cast<unsigned long long>(e.count()),
          static_cast<unsigned long long>(e.thread_id()), e.tensors(), Json(e.te_version()).c_str(),
          Strings(e.probes()).c_str(), Json(e.detail()).c_str());
    }
    if (trace.has_footer) {
      std::printf(
          "{\"footer\": {\"events\": %llu, \"dropped\": %llu, \"kernel_launches\": %llu}}\n",
          static_cast<unsigned long long>(trace.footer.events()),
          static_cast<unsigned long long>(trace.footer.dropped()),
          static_cast<unsigned long long>(trace.footer.kernel_launches()));
    }
  }
  return 0;
}
