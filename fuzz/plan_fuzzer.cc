// Fuzzes the plan reader (ParsePlanJson): any input is either a clear error naming the file, or
// a plan that the writer writes back to JSON that reads back to the same plan (with the same
// hash), and that ValidateStructure judges without crashing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_checks.h"
#include "plan/plan.h"

namespace hexiseq::fuzz {
namespace {

constexpr const char* kSource = "fuzz-plan.json";

void CheckRoundTrip(const Plan& plan) {
  const std::string written = PlanToJson(plan);
  Result<Plan> reread = ParsePlanJson(written, kSource);
  Require(reread.has_value(), "a plan that was read can be written and read back",
          reread ? "" : reread.error().message);
  Require(*reread == plan, "a plan reads back equal to what was written", written);
  Require(PlanHash(*reread) == PlanHash(plan), "the plan hash survives writing");
}

}  // namespace
}  // namespace hexiseq::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hexiseq;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Plan> plan = ParsePlanJson(text, fuzz::kSource);
  if (!plan) {
    fuzz::CheckError(plan.error(), fuzz::kSource, fuzz::kMaxReaderMessageBytes);
    return 0;
  }
  fuzz::CheckRoundTrip(*plan);
  if (Result<void> structure = ValidateStructure(*plan); !structure)
    fuzz::CheckError(structure.error(), "", fuzz::kMaxValidateMessageBytes);
  return 0;
}
