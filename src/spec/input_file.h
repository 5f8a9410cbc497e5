// Reading an input file (cluster, model, device table, plan) safely: only a regular file is read
// (a FIFO would block forever, /dev/zero would never end, a directory has no text), and only up
// to a size limit, checked on the open descriptor so that the file cannot be swapped in between.
#pragma once

#include <cstdint>
#include <string>

#include "spec/error.h"

namespace hexiseq {

// The whole content of the regular file `path`. `what` names it in messages ("cluster file");
// `hint` is added to the hint of a missing file. Errors (kIo): cannot open (with the OS reason),
// not a regular file (naming its type), larger than `max_bytes`, read error.
Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  int64_t max_bytes, const std::string& hint);

}  // namespace hexiseq
