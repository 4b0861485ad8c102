# Staging memory (memory/staging.c): white-box, so it links the static library (rf__ internals, the
# fault-injection hook). Included from tests/CMakeLists.txt.
rf_test(test_staging SOURCES test_staging.c)
rf_add_ctest(staging test_staging)
