// `fp8audit completion bash|zsh`: a shell completion script, written from the command's own
// subcommands and flags (so it cannot drift from them): subcommands first, then each one's flags,
// file names for values, and after `run`'s CMD (or `--`) the command's own completion.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/help_examples.h"

namespace fp8audit::cli {
namespace {

struct Command {
  std::string name;
  std::vector<std::string> flags;
  std::vector<std::string> valued;  // the flags that take a value (the next word is not CMD)
};

std::vector<Command> Commands(const CLI::App& app) {
  std::vector<Command> out;
  Command top{"", {"--help", "--version"}, {}};
  for (const CLI::App* sub : app.get_subcommands({})) top.flags.push_back(sub->get_name());
  out.push_back(top);
  for (const CLI::App* sub : app.get_subcommands({})) {
    Command c{sub->get_name(), {}, {}};
    for (const CLI::Option* opt : sub->get_options()) {
      const bool valued = opt->get_items_expected_min() > 0 && !opt->get_positional();
      for (const std::string& l : opt->get_lnames()) {
        c.flags.push_back("--" + l);
        if (valued) c.valued.push_back("--" + l);
      }
      for (const std::string& s : opt->get_snames()) {
        c.flags.push_back("-" + s);
        if (valued) c.valued.push_back("-" + s);
      }
    }
    out.push_back(c);
  }
  return out;
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string Bash(const std::vector<Command>& commands) {
  std::string subs, cases, run_valued;
  for (const Command& c : commands) {
    if (c.name.empty()) continue;
    subs += (subs.empty() ? "" : "|") + c.name;
    cases += "    " + c.name + ") words=\"" + Join(c.flags) + "\" ;;\n";
    if (c.name == "run") {
      for (const std::string& v : c.valued) run_valued += (run_valued.empty() ? "" : "|") + v;
    }
  }
  if (run_valued.empty()) run_valued = "--";
  return "# bash completion for fp8audit: source <(fp8audit completion bash)\n"
         "_fp8audit() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} sub=\"\" i j found=0 words\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case ${COMP_WORDS[i]} in " +
         subs +
         ") sub=${COMP_WORDS[i]}; break ;; esac\n"
         "  done\n"
         "  if [[ $sub == run ]]; then  # from -- or CMD's name on: CMD's own completion\n"
         "    for ((j = i + 1; j < COMP_CWORD; j++)); do\n"
         "      if [[ ${COMP_WORDS[j]} == -- ]]; then found=1; ((j++)); break; fi\n"
         "      [[ ${COMP_WORDS[j]} == -* ]] && continue\n"
         "      case ${COMP_WORDS[j-1]} in " +
         run_valued +
         ") continue ;; esac\n"
         "      found=1; break\n"
         "    done\n"
         "    if ((found)); then\n"
         "      if declare -F _command_offset >/dev/null; then _command_offset \"$j\"\n"
         "      elif ((j == COMP_CWORD)); then COMPREPLY=($(compgen -c -- \"$cur\"))\n"
         "      else COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
         "      return\n"
         "    fi\n"
         "  fi\n"
         "  case $sub in\n"
         "    \"\") words=\"" +
         Join(commands.front().flags) + "\" ;;\n" + cases +
         "  esac\n"
         "  if [[ -z $sub || $cur == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -o default -F _fp8audit fp8audit\n";
}

std::string Zsh(const std::vector<Command>& commands) {
  std::string cases;
  for (const Command& c : commands) {
    if (c.name.empty()) continue;
    cases += "    " + c.name + ") flags=(" + Join(c.flags) + ") ;;\n";
  }
  return "#compdef fp8audit\n"
         "# zsh completion for fp8audit: source <(fp8audit completion zsh), or save as _fp8audit\n"
         "# in a directory of $fpath\n"
         "_fp8audit() {\n"
         "  local -a flags\n"
         "  if (( CURRENT == 2 )); then\n"
         "    compadd -- " +
         Join(commands.front().flags) +
         "\n"
         "    return\n"
         "  fi\n"
         "  local dash=${words[(I)--]}\n"
         "  if [[ $words[2] == run ]] && (( dash > 2 && CURRENT > dash )); then\n"
         "    words=(${words[dash+1,-1]}); (( CURRENT -= dash )); _normal; return\n"
         "  fi\n"
         "  case $words[2] in\n" +
         cases +
         "  esac\n"
         "  if [[ $PREFIX == -* ]]; then compadd -- $flags; else _files; fi\n"
         "}\n"
         "compdef _fp8audit fp8audit\n";
}

}  // namespace

void AddCompletionCommand(CLI::App& app, int* exit_code) {
  auto shell = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("completion",
                                 "Print a shell completion script for fp8audit (bash or zsh)");
  sub->add_option("SHELL", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}))
      ->type_name("");
  sub->footer(WithExamples(
      "",
      {"source <(fp8audit completion bash)          # this shell; or add it to ~/.bashrc",
       "fp8audit completion zsh > ~/.zfunc/_fp8audit  # with ~/.zfunc on $fpath, then compinit"}));
  CLI::App* root = &app;
  sub->callback([root, shell, exit_code] {
    const std::vector<Command> commands = Commands(*root);
    std::cout << (*shell == "bash" ? Bash(commands) : Zsh(commands));
    std::cout.flush();
    if (!std::cout) {  // as `model`, `report` and `check`: a full disk, a closed pipe
      std::cerr << "fp8audit completion: cannot write to standard output\n";
      *exit_code = kExitUsage;
      return;
    }
    *exit_code = kExitOk;
  });
}

}  // namespace fp8audit::cli
