#include "agent/src/kernel_classifier.h"

#include <string>

namespace fp8audit::agent {

void KernelClassifier::Classify(const char* symbol, FunctionInfo* fn) const {
  fn->name = symbol != nullptr ? Demangle(symbol) : std::string("<unnamed kernel>");
  const PatternRule* rule = rules_.Match(fn->name);
  if (rule == nullptr) return;
  fn->event = rule->event;
  fn->chunked = rule->chunked;
  if (rule->scaled_max_param >= 0 && ParameterIsFloat(fn->name, rule->scaled_max_param)) {
    fn->scaled_max_param = rule->scaled_max_param;
  }
}

}  // namespace fp8audit::agent
