// Emulated slow links: `--link-slowdown A-B=NS[,...]` makes every byte between world ranks A and
// B (both directions) take NS nanoseconds longer, like a slow NIC in series with the real
// transport. A message to a peer on a slowed link leaves (is handed to the inner Comm) when its
// bytes x delay of wire time have been served, by a helper thread, so the sender computes on while
// its message is "on the wire". Each direction of a link is its own (links are full duplex) and is
// shared like a NIC's queues: the messages of one communicator queue behind each other, and the
// communicators with a message waiting share the link equally, each at 1 / k of its rate when k
// have one (so a message of one communicator does not wait for all of a long message of another).
// Collectives of a communicator that contains a slowed pair run over the same delayed
// point-to-point messages: all-to-all-v and all-gather directly, the all-reduces as an all-gather
// summed in rank order (each rank sends (N - 1) x the vector, N / 2 times a ring all-reduce's
// bytes: the same for N = 2). Other communicators and the barrier use the inner transport.
// Deliberately ignored: per-message latency (only a per-byte delay is added).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "spec/error.h"

namespace hexiseq::runtime {

inline constexpr double kMaxLinkDelayNsPerByte = 1e6;  // 1 KB/s: slower is a mistake

struct LinkDelay {
  int a = 0, b = 0;             // world ranks, a < b
  double seconds_per_byte = 0;  // added to every byte between a and b, both ways
  bool operator==(const LinkDelay&) const = default;
};

// Parses `A-B=NS[,A-B=NS...]` (NS: nanoseconds per byte, > 0 and <= kMaxLinkDelayNsPerByte) for a
// world of `num_ranks` ranks. Errors name `flag`, the bad piece, the rule and a hint: a rank
// outside [0, num_ranks), A = B, a pair given twice, a delay that is not a positive number.
// num_ranks = 0 checks the syntax only.
Result<std::vector<LinkDelay>> ParseLinkSlowdown(const std::string& text, int num_ranks,
                                                 const std::string& flag = "--link-slowdown");

// A CLI11 validator: "" when the syntax of `text` is right, else the message (exit code 2).
std::string LinkSlowdownSyntaxError(const std::string& text);

// Wraps a world communicator (its ranks are world ranks) so that messages on the `delays` links
// are slowed as described above; sub-communicators of the result are slowed the same way. An
// empty `delays` returns `world` itself. REQUIRES: MPI initialized with MPI_THREAD_MULTIPLE when
// `world` is an MPI communicator (MpiSession does): the helper thread posts sends.
std::unique_ptr<Comm> WithLinkDelays(std::unique_ptr<Comm> world,
                                     const std::vector<LinkDelay>& delays);

}  // namespace hexiseq::runtime
