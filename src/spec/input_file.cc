// Input files are opened non-blocking (so a FIFO does not wait for a writer), checked with
// fstat to be regular files no larger than the limit, and read with plain read(2) calls.
#include "spec/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hexiseq {
namespace {

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every return path.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string SizeText(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + " MiB" : std::to_string(bytes) + " bytes";
}

// Reads until end of file; more than `max_bytes` is an error (the file grew after fstat).
Result<std::string> ReadAll(int fd, const std::string& path, const std::string& what,
                            int64_t max_bytes, int64_t size_hint) {
  constexpr size_t kChunkBytes = size_t{1} << 16;
  std::string text;
  text.reserve(static_cast<size_t>(size_hint));
  char chunk[kChunkBytes];
  while (true) {
    const ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return IoError(path + ": error while reading the " + what + ": " + std::strerror(errno) +
                     " (rule: the " + what + " must be readable; hint: check the file)");
    }
    if (got == 0) return text;
    text.append(chunk, static_cast<size_t>(got));
    if (static_cast<int64_t>(text.size()) > max_bytes) {
      return IoError(path + ": the " + what + " is larger than " + SizeText(max_bytes) +
                     " (rule: input files are at most " + SizeText(max_bytes) +
                     "; hint: check that the path names the intended file)");
    }
  }
}

}  // namespace

Result<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                  int64_t max_bytes, const std::string& hint) {
  const std::string rule = "the " + what + " must be a readable regular file";
  const FileDescriptor fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    return IoError(path + ": cannot read the " + what + ": " + std::strerror(errno) +
                   " (rule: the " + what + " must exist and be readable; hint: check the path" +
                   (hint.empty() ? "" : "; " + hint) + ")");
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) {
    return IoError(path + ": cannot read the " + what + ": " + std::strerror(errno) +
                   " (rule: " + rule + ")");
  }
  if (!S_ISREG(info.st_mode)) {
    return IoError(path + ": cannot read the " + what + ": is " + FileTypeName(info.st_mode) +
                   " (rule: " + rule + "; hint: give the path of a file)");
  }
  if (info.st_size > max_bytes) {
    return IoError(path + ": the " + what + " is " + SizeText(info.st_size) + ", larger than " +
                   SizeText(max_bytes) + " (rule: input files are at most " + SizeText(max_bytes) +
                   "; hint: check that the path names the intended file)");
  }
  // Back to blocking reads: regular files never block, and some filesystems reject O_NONBLOCK.
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return ReadAll(fd.get(), path, what, max_bytes, info.st_size);
}

}  // namespace hexiseq
