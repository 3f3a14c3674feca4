#include "agent/src/nvtx_probe.h"

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstring>
#include <cwchar>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "agent/src/hook_probe.h"
#include "agent/src/lifecycle.h"
#include "agent/src/nvtx_parser.h"
#include "agent/src/self_profile.h"

namespace fp8audit::agent {
namespace {

struct DomainInfo {
  std::string name;
  bool fp8audit = false;
  std::atomic<uint64_t> calls{0};  // counted when self-profiling
};
struct StringInfo {
  std::string text;
};

constexpr size_t kMaxInternedStrings = 1 << 16;
constexpr size_t kMaxOpenStartedRanges = 4096;
constexpr size_t kMaxAsciiScan = 1 << 16;

struct Tables {
  Tables() { RegisterForkMutex(&mu); }
  std::mutex mu;
  std::unordered_map<std::string, DomainInfo*> domains;
  std::unordered_map<std::string, StringInfo*> strings;
  std::unordered_set<uint64_t> open_microbatch_ranges;  // nvtxRangeStart ids
  std::atomic<uint64_t> next_range_id{1};
  std::atomic<uint64_t> core_calls{0};  // calls without a domain, counted when self-profiling
};

Tables& T() {
  static Tables* tables = new Tables();
  return *tables;
}

// A message's text; wide and registered messages are converted or looked up.
class Text {
 public:
  explicit Text(const char* ascii) { SetAscii(ascii); }
  explicit Text(const wchar_t* wide) { SetWide(wide); }
  explicit Text(const nvtxEventAttributes_t* a) {
    if (a == nullptr) return;
    switch (a->messageType) {
      case NVTX_MESSAGE_TYPE_ASCII:
        SetAscii(a->message.ascii);
        break;
      case NVTX_MESSAGE_TYPE_UNICODE:
        SetWide(a->message.unicode);
        break;
      case NVTX_MESSAGE_TYPE_REGISTERED:
        if (a->message.registered != nullptr) {
          const auto* s = reinterpret_cast<const StringInfo*>(a->message.registered);
          view_ = s->text;
        }
        break;
      default:
        break;
    }
  }
  std::string_view view() const { return view_; }

 private:
  void SetAscii(const char* s) {
    if (s != nullptr) view_ = std::string_view(s, strnlen(s, kMaxAsciiScan));
  }
  void SetWide(const wchar_t* s) {
    if (s == nullptr) return;
    size_t n = 0;
    for (; s[n] != L'\0' && n < sizeof(buf_); ++n) {
      buf_[n] = (s[n] > 0 && s[n] < 0x80) ? static_cast<char>(s[n]) : '?';
    }
    view_ = std::string_view(buf_, n);
  }
  std::string_view view_;
  char buf_[kRawTextBytes];
};

std::string Narrow(const wchar_t* s) {
  std::string out;
  for (size_t i = 0; s != nullptr && s[i] != L'\0' && i < 4096; ++i) {
    out += (s[i] > 0 && s[i] < 0x80) ? static_cast<char>(s[i]) : '?';
  }
  return out;
}

// Set once, by the first InstallNvtxHandlers; never freed. Null: no handler is installed yet.
std::atomic<const NvtxProbeHost*> g_host{nullptr};

const NvtxProbeHost* Host() { return g_host.load(std::memory_order_acquire); }

HookProbe& Hook() {
  static HookProbe* hook = new HookProbe(Host()->sink);
  return *hook;
}

// Messages of fp8audit's Python hook start so (any domain).
bool MaybeHook(std::string_view text) { return text.rfind("fp8audit.", 0) == 0; }

bool Ours(nvtxDomainHandle_t domain) {
  return domain != nullptr && reinterpret_cast<const DomainInfo*>(domain)->fp8audit;
}

void RecordText(const NvtxProbeHost& h, ThreadState* ts, RawKind kind, std::string_view text) {
  RawEvent e;
  e.kind = kind;
  e.SetText(text);
  h.sink->Record(ts, &e);
}

NvtxThreadState::RangeStack* StackFor(ThreadState* ts, const void* domain) {
  NvtxThreadState& n = NvtxStateOf(ts);
  for (int i = 0; i < n.nstacks; ++i) {
    if (n.stacks[i].domain == domain) return &n.stacks[i];
  }
  if (n.nstacks < kMaxDomainStacks) {
    NvtxThreadState::RangeStack* s = &n.stacks[n.nstacks++];
    s->domain = domain;
    return s;
  }
  return &n.stacks[kMaxDomainStacks - 1];  // shared by any further domains
}

// ---- Handlers ---------------------------------------------------------------------------------

// Starts timing one NVTX call and counts it for its domain (when self-profiling).
HandlerTimer Profiled(nvtxDomainHandle_t domain) {
  if (SelfProfileOn()) {
    auto* calls =
        domain != nullptr ? &reinterpret_cast<DomainInfo*>(domain)->calls : &T().core_calls;
    calls->fetch_add(1, std::memory_order_relaxed);
  }
  return HandlerTimer(Handler::kNvtx);
}

template <typename Message>
void OnMark(nvtxDomainHandle_t domain, Message message) {
  const HandlerTimer timer = Profiled(domain);
  const NvtxProbeHost* h = Host();
  if (h == nullptr) return;
  const Text t(message);
  const std::string_view text = t.view();
  const bool step = text == h->config->step_mark;
  const bool hook = !step && MaybeHook(text) && IsHookMark(text);
  if (!step && !hook && !Ours(domain)) return;
  ThreadState* ts = h->sink->Self();
  if (ts == nullptr) return;
  if (hook) {
    Hook().OnMark(ts, text);
    if (IsTeMark(text)) {
      if (h->hook_te) h->hook_te();
      h->te_seen("Transformer Engine was imported");
    }
    return;
  }
  RecordText(*h, ts, step ? RawKind::kStep : RawKind::kStructured, text);
}

template <typename Message>
int OnPush(nvtxDomainHandle_t domain, Message message) {
  const HandlerTimer timer = Profiled(domain);
  const NvtxProbeHost* h = Host();
  if (h == nullptr) return 0;
  const Text t(message);
  const std::string_view text = t.view();
  ThreadState* ts = h->sink->Self();
  if (ts == nullptr) return 0;
  NvtxThreadState::RangeStack* st = StackFor(ts, domain);
  const uint32_t level = st->depth++;
  const bool microbatch = IsMicrobatchRange(text, h->config->microbatch_range);
  if (level < 64) {
    const uint64_t bit = 1ull << level;
    st->microbatch_bits = microbatch ? (st->microbatch_bits | bit) : (st->microbatch_bits & ~bit);
  }
  if (microbatch) {
    RecordText(*h, ts, RawKind::kMicrobatchBegin, text);
  } else if (MaybeHook(text) && text.rfind(nvtx::kHookUpdateRange, 0) == 0) {
    h->hook_update();  // CUDA is in use by now (TE updates device state)
    Hook().OnPush(ts, domain, level, text);
  } else if (Ours(domain)) {
    RecordText(*h, ts, RawKind::kStructured, text);
  }
  return static_cast<int>(level);
}

int OnPop(nvtxDomainHandle_t domain) {
  const HandlerTimer timer = Profiled(domain);
  const NvtxProbeHost* h = Host();
  if (h == nullptr) return -1;
  ThreadState* ts = h->sink->Self();
  if (ts == nullptr) return -1;
  NvtxThreadState::RangeStack* st = StackFor(ts, domain);
  if (st->depth == 0) return -1;
  const uint32_t level = --st->depth;
  if (HookStateOf(ts).nranges > 0) Hook().OnPop(ts, domain, level);
  if (level < 64 && ((st->microbatch_bits >> level) & 1) != 0) {
    st->microbatch_bits &= ~(1ull << level);
    RecordText(*h, ts, RawKind::kMicrobatchEnd, h->config->microbatch_range);
  }
  return static_cast<int>(level);
}

template <typename Message>
nvtxRangeId_t OnStart(nvtxDomainHandle_t domain, Message message) {
  const HandlerTimer timer = Profiled(domain);
  Tables& t = T();
  const nvtxRangeId_t id = t.next_range_id.fetch_add(1, std::memory_order_relaxed);
  const NvtxProbeHost* h = Host();
  if (h == nullptr) return id;
  const Text message_text(message);
  const std::string_view text = message_text.view();
  const bool microbatch = IsMicrobatchRange(text, h->config->microbatch_range);
  if (!microbatch && !Ours(domain)) return id;
  ThreadState* ts = h->sink->Self();
  if (ts == nullptr) return id;
  if (microbatch) {
    {
      std::lock_guard<std::mutex> lock(t.mu);
      if (t.open_microbatch_ranges.size() >= kMaxOpenStartedRanges) return id;
      t.open_microbatch_ranges.insert(id);
    }
    RecordText(*h, ts, RawKind::kMicrobatchBegin, text);
  } else {
    RecordText(*h, ts, RawKind::kStructured, text);
  }
  return id;
}

void OnEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  const HandlerTimer timer = Profiled(domain);
  const NvtxProbeHost* h = Host();
  if (h == nullptr) return;
  Tables& t = T();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (t.open_microbatch_ranges.erase(id) == 0) return;
  }
  ThreadState* ts = h->sink->Self();
  if (ts != nullptr) RecordText(*h, ts, RawKind::kMicrobatchEnd, h->config->microbatch_range);
}

nvtxDomainHandle_t CreateDomain(std::string name) {
  Tables& t = T();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.domains.find(name);
  if (it == t.domains.end()) {
    if (t.domains.size() >= kMaxInternedStrings) return nullptr;
    auto* d = new DomainInfo{name, name == "fp8audit"};
    it = t.domains.emplace(std::move(name), d).first;
  }
  return reinterpret_cast<nvtxDomainHandle_t>(it->second);
}

nvtxStringHandle_t RegisterString(std::string text) {
  Tables& t = T();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.strings.find(text);
  if (it == t.strings.end()) {
    if (t.strings.size() >= kMaxInternedStrings) return nullptr;
    auto* s = new StringInfo{text};
    it = t.strings.emplace(std::move(text), s).first;
  }
  return reinterpret_cast<nvtxStringHandle_t>(it->second);
}

// CORE module.
void NVTX_API MarkEx(const nvtxEventAttributes_t* a) { OnMark(nullptr, a); }
void NVTX_API MarkA(const char* m) { OnMark(nullptr, m); }
void NVTX_API MarkW(const wchar_t* m) { OnMark(nullptr, m); }
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) { return OnStart(nullptr, a); }
nvtxRangeId_t NVTX_API RangeStartA(const char* m) { return OnStart(nullptr, m); }
nvtxRangeId_t NVTX_API RangeStartW(const wchar_t* m) { return OnStart(nullptr, m); }
void NVTX_API RangeEnd(nvtxRangeId_t id) { OnEnd(nullptr, id); }
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) { return OnPush(nullptr, a); }
int NVTX_API RangePushA(const char* m) { return OnPush(nullptr, m); }
int NVTX_API RangePushW(const wchar_t* m) { return OnPush(nullptr, m); }
int NVTX_API RangePop() { return OnPop(nullptr); }

// CORE2 module (domains).
void NVTX_API DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { OnMark(d, a); }
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return OnStart(d, a);
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { OnEnd(d, id); }
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return OnPush(d, a);
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t d) { return OnPop(d); }
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* s) {
  return s == nullptr ? nullptr : RegisterString(std::string(s, strnlen(s, kMaxAsciiScan)));
}
nvtxStringHandle_t NVTX_API DomainRegisterStringW(nvtxDomainHandle_t, const wchar_t* s) {
  return s == nullptr ? nullptr : RegisterString(Narrow(s));
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  return name == nullptr ? nullptr : CreateDomain(std::string(name, strnlen(name, 4096)));
}
nvtxDomainHandle_t NVTX_API DomainCreateW(const wchar_t* name) {
  return name == nullptr ? nullptr : CreateDomain(Narrow(name));
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}  // handles stay valid: events may name them
void NVTX_API Initialize(const void*) {}

template <typename Fn>
void Set(NvtxFunctionTable table, unsigned int size, unsigned int id, Fn fn) {
  if (table != nullptr && id <= size && table[id] != nullptr) {
    *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

}  // namespace

std::string NvtxCallsByDomain() {
  Tables& t = T();
  std::string out;
  auto add = [&out](const std::string& name, uint64_t n) {
    if (n == 0) return;
    out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
  };
  add("(no domain)", t.core_calls.load(std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [name, info] : t.domains) add(name, info->calls.load(std::memory_order_relaxed));
  return out;
}

int InstallNvtxHandlers(const void* (*get_export_table)(unsigned int), const NvtxProbeHost& host) {
  if (get_export_table == nullptr) return 0;
  if (Host() == nullptr) {
    const NvtxProbeHost* expected = nullptr;
    auto* mine = new NvtxProbeHost(host);
    if (!g_host.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) delete mine;
  }
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      callbacks->GetModuleFunctionTable == nullptr) {
    return 0;
  }
  NvtxFunctionTable t = nullptr;
  unsigned int n = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) != 0 && t != nullptr) {
    Set(t, n, NVTX_CBID_CORE_MarkEx, static_cast<nvtxMarkEx_impl_fntype>(&MarkEx));
    Set(t, n, NVTX_CBID_CORE_MarkA, static_cast<nvtxMarkA_impl_fntype>(&MarkA));
    Set(t, n, NVTX_CBID_CORE_MarkW, static_cast<nvtxMarkW_impl_fntype>(&MarkW));
    Set(t, n, NVTX_CBID_CORE_RangeStartEx,
        static_cast<nvtxRangeStartEx_impl_fntype>(&RangeStartEx));
    Set(t, n, NVTX_CBID_CORE_RangeStartA, static_cast<nvtxRangeStartA_impl_fntype>(&RangeStartA));
    Set(t, n, NVTX_CBID_CORE_RangeStartW, static_cast<nvtxRangeStartW_impl_fntype>(&RangeStartW));
    Set(t, n, NVTX_CBID_CORE_RangeEnd, static_cast<nvtxRangeEnd_impl_fntype>(&RangeEnd));
    Set(t, n, NVTX_CBID_CORE_RangePushEx, static_cast<nvtxRangePushEx_impl_fntype>(&RangePushEx));
    Set(t, n, NVTX_CBID_CORE_RangePushA, static_cast<nvtxRangePushA_impl_fntype>(&RangePushA));
    Set(t, n, NVTX_CBID_CORE_RangePushW, static_cast<nvtxRangePushW_impl_fntype>(&RangePushW));
    Set(t, n, NVTX_CBID_CORE_RangePop, static_cast<nvtxRangePop_impl_fntype>(&RangePop));
  }
  t = nullptr;
  n = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) != 0 && t != nullptr) {
    Set(t, n, NVTX_CBID_CORE2_DomainMarkEx,
        static_cast<nvtxDomainMarkEx_impl_fntype>(&DomainMarkEx));
    Set(t, n, NVTX_CBID_CORE2_DomainRangeStartEx,
        static_cast<nvtxDomainRangeStartEx_impl_fntype>(&DomainRangeStartEx));
    Set(t, n, NVTX_CBID_CORE2_DomainRangeEnd,
        static_cast<nvtxDomainRangeEnd_impl_fntype>(&DomainRangeEnd));
    Set(t, n, NVTX_CBID_CORE2_DomainRangePushEx,
        static_cast<nvtxDomainRangePushEx_impl_fntype>(&DomainRangePushEx));
    Set(t, n, NVTX_CBID_CORE2_DomainRangePop,
        static_cast<nvtxDomainRangePop_impl_fntype>(&DomainRangePop));
    Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringA,
        static_cast<nvtxDomainRegisterStringA_impl_fntype>(&DomainRegisterStringA));
    Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringW,
        static_cast<nvtxDomainRegisterStringW_impl_fntype>(&DomainRegisterStringW));
    Set(t, n, NVTX_CBID_CORE2_DomainCreateA,
        static_cast<nvtxDomainCreateA_impl_fntype>(&DomainCreateA));
    Set(t, n, NVTX_CBID_CORE2_DomainCreateW,
        static_cast<nvtxDomainCreateW_impl_fntype>(&DomainCreateW));
    Set(t, n, NVTX_CBID_CORE2_DomainDestroy,
        static_cast<nvtxDomainDestroy_impl_fntype>(&DomainDestroy));
    Set(t, n, NVTX_CBID_CORE2_Initialize, static_cast<nvtxInitialize_impl_fntype>(&Initialize));
  }
  return 1;
}

}  // namespace fp8audit::agent
