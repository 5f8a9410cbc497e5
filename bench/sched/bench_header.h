// The header every scheduler bench prints: commit, build type, compiler, CPU.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include "bench_commit.h"  // HEXISEQ_COMMIT, written at build time (bench/bench_commit.cmake)

inline void PrintBenchHeader(const char* name) {
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  std::printf("# %s  commit %s  build %s  compiler g++ %s  cpu %s\n", name, HEXISEQ_COMMIT,
              HEXISEQ_BUILD_TYPE, __VERSION__, cpu.c_str());
}
