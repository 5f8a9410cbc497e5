// The report in a real browser (CTest label `browser`): headless Chromium loads a generated page
// from disk. Checks: the DOM has every section and one plan-map cell colour per rank, Chromium
// logs no console message (errors included), the screenshot is not blank (many distinct
// colours, a fair share of non-white pixels), and printing gives A4 pages. Skipped, with a
// message saying so, where chromium is not installed (scripts/setup installs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "report/report.h"
#include "report/report_test_util.h"

namespace hexiseq::report {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// $HEXISEQ_CHROMIUM when set (another build of Chromium or Chrome), else Debian's chromium.
std::string FindChromium() {
  if (const char* chosen = std::getenv("HEXISEQ_CHROMIUM"))
    return access(chosen, X_OK) == 0 ? chosen : "";
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (access(path, X_OK) == 0) return path;
  return "";
}

struct Decoded {
  int width = 0, height = 0;
  std::vector<uint32_t> pixels;  // 0xRRGGBB
};

uint32_t BigEndian(const std::string& data, size_t at) {
  return (uint32_t(uint8_t(data[at])) << 24) | (uint32_t(uint8_t(data[at + 1])) << 16) |
         (uint32_t(uint8_t(data[at + 2])) << 8) | uint32_t(uint8_t(data[at + 3]));
}

int Paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes). Empty on anything else.
Decoded DecodePng(const std::string& png) {
  Decoded out;
  std::string idat;
  int channels = 0;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t length = BigEndian(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      out.width = BigEndian(png, at + 8);
      out.height = BigEndian(png, at + 12);
      const int depth = uint8_t(png[at + 16]), color = uint8_t(png[at + 17]);
      if (depth != 8 || (color != 2 && color != 6) || png[at + 20] != 0) return {};
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, length);
    }
    at += 12 + length;
  }
  if (channels == 0) return {};
  const size_t stride = size_t(out.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * out.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
      Z_OK)
    return {};
  std::vector<uint8_t> previous(stride, 0), row(stride);
  for (int y = 0; y < out.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* line = &raw[y * (stride + 1) + 1];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(channels) ? row[x - channels] : 0, b = previous[x];
      const int c = x >= size_t(channels) ? previous[x - channels] : 0;
      const int predictor = filter == 1   ? a
                            : filter == 2 ? b
                            : filter == 3 ? (a + b) / 2
                            : filter == 4 ? Paeth(a, b, c)
                                          : 0;
      row[x] = uint8_t(line[x] + predictor);
    }
    for (int x = 0; x < out.width; ++x) {
      const uint8_t* p = &row[x * channels];
      out.pixels.push_back((uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]);
    }
    previous = row;
  }
  return out;
}

class Browser : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = FindChromium();
    if (chromium_.empty())
      GTEST_SKIP() << "chromium is not installed (or $HEXISEQ_CHROMIUM is not executable), so "
                      "the report was NOT checked in a browser (install it with scripts/setup)";
    dir_ = fs::temp_directory_path() / ("hexiseq_browser_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const std::string source = HEXISEQ_SOURCE_PATH;
    auto cluster = LoadCluster(source + "/examples/clusters/h100-a100-16.yaml", DeviceCatalog());
    ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
    auto model = LoadModel("llama3-8b");
    ASSERT_TRUE(model.has_value());
    const auto cost = reporttest::Model(*cluster, *model, 256 << 10);
    auto data = BuildReport(cost->problem(), std::nullopt);
    ASSERT_TRUE(data.has_value()) << data.error().message;
    ASSERT_TRUE(data->plan.has_value());
    for (const PlanGroup& group : data->plan->groups)
      for (const PlanMember& member : group.members)
        ranks_with_heads_ += !member.heads.empty() && !group.tokens.empty();
    page_ = dir_ + "/report.html";
    std::ofstream(page_) << ReportHtml(*data);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs chromium headless on the page with `flags`; returns its exit status.
  int Chromium(const std::string& flags, const std::string& stdout_path,
               const std::string& stderr_path) {
    const std::string profile = dir_ + "/profile";
    const std::string cmd =
        "timeout 120 " + chromium_ +
        " --headless=new --no-sandbox --disable-gpu "
        "--disable-background-networking --disable-component-update "
        "--disable-sync --no-first-run --disable-dev-shm-usage --user-data-dir=" +
        profile + " " + flags + " file://" + page_ + " >" + stdout_path + " 2>" + stderr_path;
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string chromium_, dir_, page_;
  size_t ranks_with_heads_ = 0;
};

TEST_F(Browser, DomHasEverySectionAndNoConsoleMessage) {
  const std::string dom_path = dir_ + "/dom.html", log_path = dir_ + "/log.txt";
  ASSERT_EQ(Chromium("--enable-logging=stderr --v=0 --dump-dom", dom_path, log_path), 0)
      << ReadAll(log_path);
  const std::string dom = ReadAll(dom_path), log = ReadAll(log_path);
  for (const char* id :
       {"headline", "training", "cluster", "plan-map", "load", "timeline", "strategies"})
    EXPECT_NE(dom.find(std::string("<section id=\"") + id + "\">"), std::string::npos) << id;
  EXPECT_EQ(reporttest::Fills(dom, "class=\"cell\"").size(), ranks_with_heads_);
  EXPECT_EQ(dom.find("Not drawn"), std::string::npos);
  EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;
}

TEST_F(Browser, ScreenshotIsNotBlank) {
  const std::string png_path = dir_ + "/shot.png", log_path = dir_ + "/log.txt";
  ASSERT_EQ(Chromium("--screenshot=" + png_path + " --window-size=1280,2400", dir_ + "/out.txt",
                     log_path),
            0)
      << ReadAll(log_path);
  const Decoded image = DecodePng(ReadAll(png_path));
  ASSERT_EQ(image.width, 1280);
  ASSERT_EQ(image.height, 2400);
  std::set<uint32_t> colors(image.pixels.begin(), image.pixels.end());
  size_t ink = 0;
  for (const uint32_t pixel : image.pixels) ink += pixel != 0xFFFFFF;
  constexpr size_t kMinColors = 32;         // palette, shades, anti-aliasing
  constexpr double kMinInkFraction = 0.10;  // figures fill a good part of the first screens
  EXPECT_GE(colors.size(), kMinColors);
  EXPECT_GE(double(ink) / image.pixels.size(), kMinInkFraction);
  std::printf("screenshot: %zu colours, %.1f%% non-white\n", colors.size(),
              100.0 * ink / image.pixels.size());
}

TEST_F(Browser, PrintsOnA4) {
  const std::string pdf_path = dir_ + "/report.pdf", log_path = dir_ + "/log.txt";
  ASSERT_EQ(
      Chromium("--no-pdf-header-footer --print-to-pdf=" + pdf_path, dir_ + "/out.txt", log_path), 0)
      << ReadAll(log_path);
  const std::string pdf = ReadAll(pdf_path);
  ASSERT_TRUE(pdf.starts_with("%PDF")) << "no PDF written";
  // A4 is 595.3 x 841.9 points; Chromium writes each page's MediaBox uncompressed.
  const int pages = reporttest::Count(pdf, "/MediaBox [0 0 594.9");
  EXPECT_GE(pages, 2) << "A4 pages in the PDF";
  EXPECT_EQ(reporttest::Count(pdf, "/MediaBox"), pages) << "every page is A4";
}

}  // namespace
}  // namespace hexiseq::report
