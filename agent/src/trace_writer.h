// The trace file of one process (writer thread only): converts the drained events, feeds them to
// the live check and appends them to <host>.<pid>[.N][.rank<r>].fp8trace, which it creates with
// the header. It writes whole records only (proto/trace_io.h): what a full disk (or the file size
// limit) does not take stays queued, up to kMaxUnwrittenBytes, and is written at the next cycle
// that has room; events beyond that are dropped and counted in the footer. Said once on stderr, and
// again at the end when the trace stays without its footer. Before an exec it seals the trace: all
// pending events and a footer, taken back again (Unseal) when the exec fails.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/src/converter.h"
#include "agent/src/live_check.h"
#include "agent/src/raw_event.h"
#include "agent/src/rings.h"
#include "fp8audit/trace.pb.h"
#include "proto/trace_io.h"

namespace fp8audit::agent {

// Header facts about CUDA, filled by the kernel probe when it attaches.
struct CudaFacts {
  std::string gpu, driver, cuda;
  std::string cupti;  // the CUPTI library loaded (path)
  uint32_t cupti_api_version = 0;
};

// What a process's trace header says (`command`: its argv; `probes`: the active update probes,
// probe_control.h; `start_unix_ns` set by the caller). Strings that are not UTF-8 (host, argv,
// facts) are escaped and marked (proto/text_escape.h).
::fp8audit::v1::TraceHeader MakeTraceHeader(const Config& config, const std::string& host,
                                            uint32_t pid, uint32_t parent_pid,
                                            const std::vector<std::string>& command,
                                            const CudaFacts& facts, uint32_t probes = 0);

// What the trace writer is handed by the one who constructs it (the agent, agent.h): the process
// it records (configuration, identity, CUDA facts, counters), its rings, its active probes, and a
// call at each writer cycle.
class TraceSource {
 public:
  virtual ~TraceSource() = default;
  virtual const Config& config() const = 0;
  virtual const std::string& host() const = 0;
  virtual uint32_t pid() const = 0;
  virtual uint32_t parent_pid() const = 0;
  virtual CudaFacts cuda_facts() = 0;
  // Kernel launches counted in the process.
  virtual uint64_t launches() const = 0;
  virtual Rings& rings() = 0;
  // The active update probes (probe_control.h's bits).
  virtual uint32_t probes() const = 0;
  // On the writer thread, after each cycle but the last.
  virtual void OnWriterCycle() = 0;
};

inline constexpr size_t kMaxUnwrittenBytes = 32u << 20;
inline constexpr uint64_t kOrderSlackNs = 20'000'000;  // events this recent wait for the next cycle

class TraceWriter {
 public:
  explicit TraceWriter(TraceSource& source);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Creates the file and writes the header (queued when the disk is full). False (said on stderr)
  // when the file cannot be created.
  bool Open();
  // One drain. `everything`: write all pending events (no ordering slack). `final`: also release
  // held events and write the footer (the live check's verdict is taken then).
  void Cycle(bool everything, bool final);
  // Before an exec: every pending event and a footer, written now. Nothing more until Unseal.
  void Seal();
  // The exec failed: the footer is taken back (cut from the file or from what is queued).
  void Unseal();
  bool sealed() const { return sealed_; }

  bool fail_fast_now() const;
  const LiveCheck& live() const { return live_; }
  const std::string& path() const { return path_; }

 private:
  // Converts the drained events due now into events_ (`final`: the held ones too).
  void Convert(bool everything, bool final);
  // Appends events_ (the live check sees each); those beyond kMaxUnwrittenBytes are dropped.
  void AppendEvents();
  void AppendFooter();
  // Writes what is queued; keeps it queued when the file does not take it.
  bool Flush();
  std::string Reason() const;  // why the last write failed

  TraceSource& source_;
  EventConverter converter_;
  LiveCheck live_;
  std::unique_ptr<TraceFileWriter> file_;
  std::string path_;
  std::string buffer_;  // framed records not yet written: the file's bytes from file_->size() on
  std::vector<RawEvent> pending_;
  std::vector<::fp8audit::v1::Event> events_;
  uint64_t events_written_ = 0;  // event records queued or written (the footer's count)
  uint64_t unwritten_dropped_ = 0;
  bool write_failed_ = false;  // the last write failed
  bool failure_said_ = false;
  bool drop_said_ = false;
  bool sealed_ = false;
  uint64_t footer_at_ = 0;  // where the seal's footer begins (file bytes + queued bytes)
};

}  // namespace fp8audit::agent
