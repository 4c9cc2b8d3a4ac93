// The Catch2 test runner (its main and its whole implementation), compiled
// once for both test binaries. It is third-party harness code: the
// sanitizer builds compile it without instrumentation (tests/CMakeLists.txt),
// which took this one file from ~70 s to ~10 s of every ASan+UBSan build;
// the library and every test file stay instrumented, and the sanitizer
// runtime still watches every allocation.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
