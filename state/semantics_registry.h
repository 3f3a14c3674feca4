// The one registration point of the ownership semantics: each row names a semantics, its aliases,
// the Transformer Engine releases it models and its rules. Adding a release's semantics is one new
// header with its SemanticsRules (state/semantics_te_2_17.h is the example) and one row here;
// names and aliases are declared nowhere else (semantics.h derives every lookup and the list of
// names from this table). Header-only, so that code that only resolves names (reports/) needs no
// library.
#pragma once

#include <string_view>

#include "state/semantics_fixed.h"
#include "state/semantics_rules.h"
#include "state/semantics_te_172bd93.h"
#include "state/semantics_te_2_17.h"
#include "state/semantics_te_2_20.h"
#include "state/semantics_te_3456.h"

namespace fp8audit::state {

// Lists are ", "-separated ("" none). A release is the start of transformer_engine.__version__:
// "2.20" models "2.20" and "2.20.*".
struct SemanticsEntry {
  std::string_view name;
  std::string_view aliases;
  std::string_view te_releases;
  const SemanticsRules* rules = nullptr;
};

// In the order kSemanticsNames lists them.
inline constexpr SemanticsEntry kBuiltinSemantics[] = {
    {"fixed", "", "", &kFixedRules},
    {"te-2.20", "", "2.20", &kTe220Rules},
    // 2.19.0 differs from 2.20.2 exactly where te-2.20 differs from te-172bd93 (SEMANTICS.md).
    {"te-172bd93", "te-2.19, te-legacy", "2.19", &kTe172bd93Rules},
    // 2.16.0-2.18.0 differ from 2.19.0 in ownership only by TE's PR #3284; 2.14.1 decides as
    // 2.17.1 with its state in class attributes (SEMANTICS.md).
    {"te-2.17", "te-2.14, te-2.16, te-2.18", "2.14, 2.16, 2.17, 2.18", &kTe217Rules},
    // TE's PR #3456 (at TE commit e65294e, on main after 2.20): no release, chosen by name or by a
    // fingerprint of its API.
    {"te-3456", "te-pr-3456", "", &kTe3456Rules},
};

}  // namespace fp8audit::state
