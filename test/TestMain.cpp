//===- test/TestMain.cpp - doctest's main ---------------------------------===//
//
// doctest's main, and one rule of its own: a run whose filter selects no
// test case fails. ctest runs each case by name, so a name the filter
// cannot match (CMake once split names at ';') would otherwise pass
// without running anything.
//===----------------------------------------------------------------------===//
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

bool gSelectedNone = false;

struct SelectedNoneListener : doctest::IReporter {
  explicit SelectedNoneListener(const doctest::ContextOptions &) {}
  void report_query(const doctest::QueryData &) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats &stats) override {
    gSelectedNone = stats.numTestCasesPassingFilters == 0;
  }
  void test_case_start(const doctest::TestCaseData &) override {}
  void test_case_reenter(const doctest::TestCaseData &) override {}
  void test_case_end(const doctest::CurrentTestCaseStats &) override {}
  void test_case_exception(const doctest::TestCaseException &) override {}
  void subcase_start(const doctest::SubcaseSignature &) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData &) override {}
  void log_message(const doctest::MessageData &) override {}
  void test_case_skipped(const doctest::TestCaseData &) override {}
};

REGISTER_LISTENER("selected-none", 1, SelectedNoneListener);

} // namespace

int main(int argc, char **argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit())
    return rc;
  if (gSelectedNone) {
    std::fprintf(stderr, "error: no test case matches the filters\n");
    return rc ? rc : 1;
  }
  return rc;
}
