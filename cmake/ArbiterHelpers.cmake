# arbiter_cc_library(NAME SRCS HDRS DEPS PUBLIC_DEPS): a static library with the
# project's warnings (ours only, never third-party code).
# -Wno-restrict: GCC 12 reports false -Wrestrict errors inside libstdc++'s
# std::string at -O2/-O3 (GCC bug 105329); they are not in our code.
# -Wno-missing-field-initializers: our value types give every member a default,
# so brace-initializing the leading members is intended.
set(ARBITER_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter
                     $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict> -Wno-missing-field-initializers)

function(arbiter_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${ARG_NAME} PRIVATE ${ARBITER_WARNINGS})
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
endfunction()

function(arbiter_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${ARBITER_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
endfunction()

# arbiter_cc_test(NAME SRCS DEPS LABELS): a GoogleTest binary whose cases are
# discovered one CTest test each. Tests labelled `pg` or `integration` require
# the throwaway PostgreSQL fixture (tests/testing/pg_fixture) and receive its
# DSN file through ARBITER_TEST_PG_DSN_FILE (one variable: gtest_discover_tests
# splits list-valued properties). Its main is tests/testing/gtest_main.cc: a
# suite whose SetUpTestSuite fails fails the binary instead of reading as
# skipped.
function(arbiter_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${ARBITER_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock arbiter_test_main)
  set(props LABELS "${ARG_LABELS}")
  if("pg" IN_LIST ARG_LABELS OR "integration" IN_LIST ARG_LABELS)
    list(APPEND props FIXTURES_REQUIRED pg
         ENVIRONMENT "ARBITER_TEST_PG_DSN_FILE=${ARBITER_PG_FIXTURE_DIR}/dsn")
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
endfunction()
