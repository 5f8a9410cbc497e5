// Helpers for the end-to-end tests of the hexiseq command: run the built binary with arguments,
// capture its exit code, stdout and stderr; write input files into a per-process temp folder.
#pragma once

#include <initializer_list>
#include <string>

struct CmdResult {
  int code = -1;
  std::string out, err;
};

// A per-process temporary folder (created on first use).
std::string TempDir();
// Writes `text` to TempDir()/name and returns the path.
std::string Write(const std::string& name, const std::string& text);
std::string Slurp(const std::string& path);
// Runs `hexiseq <args>` through the shell, under `timeout` when `timeout_seconds` > 0 (exit
// code 124 when it ran too long).
CmdResult Hexiseq(const std::string& args, int timeout_seconds = 0);
// A path inside the source tree.
std::string Example(const std::string& rel);
// Exit code 1, empty stdout, and every needle in stderr.
void ExpectBadInput(const CmdResult& r, std::initializer_list<const char*> needles);
