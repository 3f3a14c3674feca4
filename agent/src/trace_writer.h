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
#include "fp8audit/trace.pb.h"
#include "proto/trace_io.h"

namespace fp8audit::agent {

class Agent;

inline constexpr size_t kMaxUnwrittenBytes = 32u << 20;

class TraceWriter {
 public:
  explicit TraceWriter(Agent& agent);
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

  Agent& agent_;
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
