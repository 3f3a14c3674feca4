# cmake -DROOT=<checkout> -P check_ops_version.cmake: the optional ops package (python/ops) has
# fp8audit's version (CMakeLists.txt's project()) in its pyproject.toml, its CMake project and its
# requirement on fp8audit, so `pip install fp8audit-ops` of one release needs that release.
file(READ ${ROOT}/CMakeLists.txt root)
string(REGEX MATCH "project\\(fp8audit VERSION ([0-9.]+)" _ "${root}")
set(version ${CMAKE_MATCH_1})
file(READ ${ROOT}/python/ops/pyproject.toml pyproject)
file(READ ${ROOT}/python/ops/CMakeLists.txt ops_cmake)
foreach(pair "pyproject.toml version|version = \"${version}\""
             "pyproject.toml requirement|\"fp8audit==${version}\""
             "CMakeLists.txt project|project(fp8audit_ops VERSION ${version} ")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 what)
  list(GET pair 1 text)
  set(in "${pyproject}")
  if(what MATCHES "^CMakeLists")
    set(in "${ops_cmake}")
  endif()
  string(FIND "${in}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "python/ops/${what} does not say fp8audit's version ${version} (${text})")
  endif()
endforeach()
message(STATUS "python/ops: version ${version}, requires fp8audit==${version}")
