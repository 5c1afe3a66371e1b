// The man pages and the bash completion, made from the command line's own
// definition: the CLI11 app main() builds is the one source of `--help`,
// of srdma(1) and the srdma-SUBCOMMAND(1) pages, and of the completion, so
// none of them can drift from the others. Build steps run them
// (cmake/cli_docs.cmake): `srdma --generate-man DIR` and
// `srdma --generate-bash-completion`, arguments main() handles before it
// parses, not options of srdma's.
#pragma once

#include <string>

#include "srdma/status.h"

namespace CLI {
class App;
}

namespace srdma::tools {

// DIR/srdma.1, and DIR/srdma-A-B.1 for the subcommand `srdma A B` at every
// depth: NAME, SYNOPSIS, DESCRIPTION (the description and the footer),
// OPTIONS and POSITIONALS (each as --help shows it), COMMANDS, SEE ALSO.
// `version` goes in each page's header.
Result<void> write_man_pages(const CLI::App& app, const std::string& dir, const std::string& version);

// A bash completion script (function _srdma, complete -F _srdma srdma):
// the subcommands at each level, then the options of the subcommand typed;
// after an option that takes a value, file names; after `srdma run --`,
// commands.
std::string bash_completion(const CLI::App& app);

}  // namespace srdma::tools
