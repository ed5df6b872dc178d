# One CTest test per GoogleTest suite (issue 43): `loom_gtest_suites(target PROPERTIES ...)`.
#
# gtest_discover_tests makes one CTest test, hence one process, per case: each of ~800 processes
# loaded LibTorch and rebuilt its suite's fixture again. Here a suite is one process
# (`--gtest_filter=Suite.*`), named after the suite, so a fixture built in SetUpTestSuite is built
# once and -j2 schedules ~100 processes instead of ~800. A failing case is still named: the
# process prints `[  FAILED  ] Suite.Case` for each, and --output-on-failure shows it.
#
# After each build of the target, LoomGTestSuitesList.cmake lists its suites
# (`--gtest_list_tests`) and writes the CTest lines; the target's CTest include file reads them
# (a target not built yet is one failing NOT_BUILT test, as gtest_discover_tests does). Every
# suite gets LOOM_TEST_ENV_MODIFICATION (tests/CMakeLists.txt) as its ENVIRONMENT_MODIFICATION.

set(_loom_gtest_suites_script "${CMAKE_CURRENT_LIST_DIR}/LoomGTestSuitesList.cmake")

function(loom_gtest_suites target)
  cmake_parse_arguments(A "" "WORKING_DIRECTORY" "PROPERTIES" ${ARGN})
  if(NOT A_WORKING_DIRECTORY)
    set(A_WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}")
  endif()
  # The properties as CTest-file arguments, each element bracket-quoted (paths, `A=B` values).
  set(props "")
  foreach(p IN LISTS A_PROPERTIES LOOM_TEST_PROPERTIES)
    string(APPEND props " [==[${p}]==]")
  endforeach()
  set(base "${CMAKE_CURRENT_BINARY_DIR}/${target}")
  file(GENERATE OUTPUT "${base}_suites_args.cmake" CONTENT
"set(LOOM_EXE [==[$<TARGET_FILE:${target}>]==])
set(LOOM_TARGET [==[${target}]==])
set(LOOM_WORKDIR [==[${A_WORKING_DIRECTORY}]==])
set(LOOM_PROPS [=====[${props}]=====])
set(LOOM_ENV_MODIFICATION [==[${LOOM_TEST_ENV_MODIFICATION}]==])
")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" -D "ARGS_FILE=${base}_suites_args.cmake"
            -D "OUT=${base}_suites.cmake" -P "${_loom_gtest_suites_script}"
    BYPRODUCTS "${base}_suites.cmake"
    VERBATIM)
  file(WRITE "${base}_include.cmake"
"if(EXISTS [==[${base}_suites.cmake]==])
  include([==[${base}_suites.cmake]==])
else()
  add_test([==[${target}_NOT_BUILT]==] [==[${target}_NOT_BUILT]==])
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${base}_include.cmake")
endfunction()
