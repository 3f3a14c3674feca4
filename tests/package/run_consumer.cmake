# cmake -DBUILD=<fp8audit build> -DWORK=<scratch dir> -DGENERATOR=<g> -P run_consumer.cmake
# Installs the build into WORK/prefix, then configures, builds and runs tests/package/consumer
# against it with find_package(fp8audit) (CMAKE_PREFIX_PATH=WORK/prefix and nothing else of the
# build). Fails on the first step that fails, naming it.
file(REMOVE_RECURSE ${WORK})
function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
foreach(f bin/fp8audit lib/libfp8audit.so lib/libfp8audit_impl.so lib/cmake/fp8audit/fp8auditConfig.cmake
          lib/cmake/fp8audit/fp8auditConfigVersion.cmake include/fp8audit/runtime/state_manager.h
          include/fp8audit/fp8audit/nvtx_events.h)
  if(NOT EXISTS ${WORK}/prefix/${f})
    message(FATAL_ERROR "consumer: ${f} was not installed")
  endif()
endforeach()
get_filename_component(source ${CMAKE_CURRENT_LIST_DIR}/consumer ABSOLUTE)
step("configure" ${CMAKE_COMMAND} -S ${source} -B ${WORK}/build -G ${GENERATOR}
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK}/prefix)
step("build" ${CMAKE_COMMAND} --build ${WORK}/build)
step("run" ${WORK}/build/consumer)
message(STATUS "consumer: ${step_output}")
if(NOT step_output MATCHES "forward 1 backward 1")
  message(FATAL_ERROR "consumer: expected one forward and one backward update, got ${step_output}")
endif()
