// The main of every GoogleTest executable (tests/CMakeLists.txt): GoogleTest's own, except that
// a run in which every selected case skipped itself (a GPU test without a GPU, a parity case
// without its reference) exits 77, which CTest reports as Skipped (SKIP_RETURN_CODE). CTest runs
// one process per suite (cmake/LoomGTestSuites.cmake), and a suite that only skipped must not
// read as passed.

#include <gtest/gtest.h>

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
    if (rc == 0 && u.successful_test_count() == 0 && u.skipped_test_count() > 0) return 77;
    return rc;
}
