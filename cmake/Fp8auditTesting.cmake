include(GoogleTest)

# fp8audit_add_test(NAME SOURCES a.cc ... LIBS lib ... [LABELS gpu;benchmark])
# A GoogleTest executable whose tests are registered with CTest one by one, carrying LABELS.
function(fp8audit_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  target_compile_options(${name} PRIVATE ${FP8AUDIT_WARNINGS})
  target_compile_definitions(${name} PRIVATE
                             FP8AUDIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                             FP8AUDIT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(labels ${T_LABELS})
  if(NOT labels)
    set(labels cpu)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${labels}" DISCOVERY_TIMEOUT 120)
endfunction()
