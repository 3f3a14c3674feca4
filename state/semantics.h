// The ownership semantics by name (resolved through semantics_registry.h), and the module kinds of
// the ownership model. The checkpoint kind is fp8audit::CheckpointKind (fp8audit/vocabulary.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "fp8audit/vocabulary.h"
#include "state/semantics_registry.h"

namespace fp8audit::state {

class Semantics;
namespace internal {
constexpr Semantics SemanticsAt(size_t index);
// By name: comparing the rules' addresses is not a constant expression under GCC's sanitizers.
constexpr size_t BuiltinIndex(std::string_view name) {
  size_t i = 0;
  while (i < std::size(kBuiltinSemantics) && kBuiltinSemantics[i].name != name) ++i;
  return i;
}
}  // namespace internal

// A handle on one registered semantics (a row of kBuiltinSemantics or one RegisterSemantics
// added). The built-in ones code names directly: kFixed, the corrected ownership; kTeLegacy,
// Transformer Engine at commit 172bd93 (named "te-172bd93"; aliases "te-legacy" and "te-2.19"),
// which is also the 2.19 release where the model looks (SEMANTICS.md); kTe220, the Transformer
// Engine 2.20 release (read from 2.20.2's source).
class Semantics {
 public:
  static const Semantics kFixed;
  static const Semantics kTeLegacy;
  static const Semantics kTe220;

  constexpr size_t index() const { return index_; }
  friend constexpr bool operator==(Semantics, Semantics) = default;

 private:
  friend constexpr Semantics internal::SemanticsAt(size_t index);
  constexpr explicit Semantics(size_t index) : index_(static_cast<uint8_t>(index)) {}
  uint8_t index_;
};
inline constexpr Semantics Semantics::kFixed{internal::BuiltinIndex("fixed")};
inline constexpr Semantics Semantics::kTeLegacy{internal::BuiltinIndex("te-172bd93")};
inline constexpr Semantics Semantics::kTe220{internal::BuiltinIndex("te-2.20")};

namespace internal {
constexpr Semantics SemanticsAt(size_t index) { return Semantics(index); }
// Semantics registered at run time, after the built-in ones.
inline std::vector<SemanticsEntry>& AddedSemantics() {
  static std::vector<SemanticsEntry> added;
  return added;
}
inline const SemanticsEntry& EntryOf(Semantics s) {
  const size_t builtin = std::size(kBuiltinSemantics);
  return s.index() < builtin ? kBuiltinSemantics[s.index()] : AddedSemantics()[s.index() - builtin];
}
// Calls visit(Semantics, const SemanticsEntry&) for every registered semantics, in order, until
// it returns true; returns the semantics it stopped at.
template <typename Visit>
std::optional<Semantics> FindSemantics(Visit visit) {
  const size_t builtin = std::size(kBuiltinSemantics);
  const size_t total = builtin + AddedSemantics().size();
  for (size_t i = 0; i < total; ++i) {
    if (visit(EntryOf(SemanticsAt(i)))) return SemanticsAt(i);
  }
  return std::nullopt;
}
// True when pred(item) holds for an item of a ", "-separated list.
template <typename Pred>
constexpr bool AnyListed(std::string_view list, Pred pred) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (item.starts_with(' ')) item.remove_prefix(1);
    if (!item.empty() && pred(item)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}
// Writes kSemanticsNames piece by piece through put(std::string_view).
template <typename Put>
constexpr void JoinBuiltinNames(Put put) {
  for (size_t i = 0; i < std::size(kBuiltinSemantics); ++i) {
    if (i != 0) put(", ");
    put(kBuiltinSemantics[i].name);
    if (kBuiltinSemantics[i].aliases.empty()) continue;
    put(" (aliases ");
    put(kBuiltinSemantics[i].aliases);
    put(")");
  }
}
constexpr size_t BuiltinNamesSize() {
  size_t n = 0;
  JoinBuiltinNames([&n](std::string_view piece) { n += piece.size(); });
  return n;
}
inline constexpr auto kBuiltinNames = [] {
  std::array<char, BuiltinNamesSize()> out{};
  size_t n = 0;
  JoinBuiltinNames([&](std::string_view piece) {
    for (char c : piece) out[n++] = c;
  });
  return out;
}();
}  // namespace internal

static_assert(Semantics::kFixed.index() < std::size(kBuiltinSemantics) &&
                  Semantics::kTeLegacy.index() < std::size(kBuiltinSemantics) &&
                  Semantics::kTe220.index() < std::size(kBuiltinSemantics),
              "every built-in Semantics constant has its row in kBuiltinSemantics");

// Every built-in name and alias, for --help and error messages:
// "fixed, te-2.20, te-172bd93 (aliases te-2.19, te-legacy), te-2.17 (aliases te-2.14, te-2.16,
// te-2.18)".
inline constexpr std::string_view kSemanticsNames{internal::kBuiltinNames.data(),
                                                  internal::kBuiltinNames.size()};

inline std::string_view SemanticsName(Semantics s) { return internal::EntryOf(s).name; }
// Its aliases, ", "-separated ("" none).
inline std::string_view SemanticsAliases(Semantics s) { return internal::EntryOf(s).aliases; }
inline const SemanticsRules& RulesOf(Semantics s) { return *internal::EntryOf(s).rules; }

// Every registered semantics, in registration order (kFixed first).
inline std::vector<Semantics> AllSemantics() {
  std::vector<Semantics> out;
  const size_t total = std::size(kBuiltinSemantics) + internal::AddedSemantics().size();
  for (size_t i = 0; i < total; ++i) out.push_back(internal::SemanticsAt(i));
  return out;
}

// The semantics named `name` or one of its aliases; nullopt for an unknown name.
inline std::optional<Semantics> ParseSemantics(std::string_view name) {
  if (name.empty()) return std::nullopt;
  return internal::FindSemantics([name](const SemanticsEntry& e) {
    using internal::AnyListed;
    return e.name == name || AnyListed(e.aliases, [name](std::string_view a) { return a == name; });
  });
}

// The semantics that model a Transformer Engine release, from its version string as
// transformer_engine.__version__ spells it ("2.20.2", "2.20.0.dev0+abc"); nullopt when no
// semantics was read from that release.
inline std::optional<Semantics> SemanticsForTeVersion(std::string_view version) {
  return internal::FindSemantics([version](const SemanticsEntry& e) {
    using internal::AnyListed;
    return AnyListed(e.te_releases, [version](std::string_view release) {
      return version.starts_with(release) &&
             (version.size() == release.size() || version[release.size()] == '.');
    });
  });
}

// Adds a semantics after the built-in ones (a test's, or one being developed before its row in
// kBuiltinSemantics) and returns its handle; nullopt when its name or an alias already resolves
// or the rules are missing. The entry's strings and rules must outlive every use of the handle.
// Not thread-safe: register before other threads resolve names.
inline std::optional<Semantics> RegisterSemantics(const SemanticsEntry& entry) {
  const size_t next = std::size(kBuiltinSemantics) + internal::AddedSemantics().size();
  if (entry.rules == nullptr || entry.name.empty() || ParseSemantics(entry.name) || next > 255) {
    return std::nullopt;
  }
  if (internal::AnyListed(entry.aliases, [](std::string_view a) { return ParseSemantics(a); })) {
    return std::nullopt;
  }
  internal::AddedSemantics().push_back(entry);
  return internal::SemanticsAt(next);
}

// kLayerNormMlpCheckpoint: a LayerNormMLP built with checkpoint=True (its own recompute).
// kGroupedLinear: te.GroupedLinear. kOpsFuser: a te.ops fuser (te.LayerNorm, te.RMSNorm,
// te.ops.Sequential), which reads the first-module flag whether or not FP8 is on.
enum class ModuleKind : uint8_t {
  kLinear,
  kLayerNormLinear,
  kLayerNormMlp,
  kLayerNormMlpCheckpoint,
  kGroupedLinear,
  kOpsFuser
};

}  // namespace fp8audit::state
