// The Catch2 test runner (its main and its whole implementation), compiled
// once for all test binaries. It is third-party harness code whose speed no
// test measures: it is compiled at -O0 in every build (18 s where -O3 took
// 36 s, the largest test file of the release build), and the sanitizer
// builds compile it without instrumentation (tests/CMakeLists.txt), which
// took it from ~70 s to ~10 s of every ASan+UBSan build; the library and
// every test file stay instrumented, and the sanitizer runtime still watches
// every allocation.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
