// libfp8audit.so's handling of fatal signals (shim_signals.cc): the agent catches the signals
// whose default action ends the process, to finish the trace first, while the job reads back and
// sets its own dispositions through this library's sigaction and signal, as if the agent were not
// there. Libc only.
#pragma once

namespace fp8audit::agent {

// Finds libc's sigaction and signal (the next definitions); called from the library's constructor.
void ResolveSignalFunctions();

// Catches the fatal signals whose disposition is not SIG_IGN; `finish` (the implementation's
// bounded final flush) runs before a default action. Returns false, installing nothing, where the
// program's sigaction does not bind to this library (it was not preloaded: catching would show).
bool ManageFatalSignals(void (*finish)());

}  // namespace fp8audit::agent
