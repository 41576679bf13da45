// What ditskip-run's verbs share: the usage text, the one-line usage error, the arguments every verb parses alike.
// Each verb lives in its own file (ditskip_run.cpp: train, step, footprint; verb_personalize.cpp; verb_generate.cpp)
// and uses the C header alone.
#pragma once

#include <string>

extern const char kUsage[];

// Prints the usage and "ditskip-run VERB: error: MESSAGE" on stderr; returns 2 (argparse's exit code).
int usage_error(const std::string& verb, const std::string& message);
// --json, --help, an unknown flag, and the verb's one positional argument. Returns -1 when `a` was taken, else the
// exit code to return.
int common_arg(const std::string& a, std::string& positional, bool& as_json);
bool parse_int(const char* text, long long& out);

int personalize_verb(int argc, char** argv);   // verb_personalize.cpp
int generate_verb(int argc, char** argv);      // verb_generate.cpp
