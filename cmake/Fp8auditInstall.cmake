# What `cmake --install` installs, in one of two layouts:
#
#   prefix (default)  bin/fp8audit, bin/fp8-repro; lib/libfp8audit.so + lib/libfp8audit_impl.so (the
#                     agent), lib/libfp8audit_model.so, lib/libfp8audit_markers.so,
#                     lib/libfp8audit_ops.so (torch.ops.fp8audit); lib/python/fp8audit;
#                     include/fp8audit/... (runtime/, state/, kernels/, proto/ and fp8audit/*.pb.h,
#                     fp8audit/nvtx_events.h); lib/cmake/fp8audit: the CMake package (find_package(
#                     fp8audit): fp8audit::runtime, the fixed runtime, with what it links).
#   wheel (SKBUILD)   scikit-build-core installs into the package directory (pyproject.toml:
#                     wheel.install-dir): fp8audit/bin/fp8audit and fp8audit/lib/*.so beside the
#                     Python modules; no headers, no CMake package, no fp8-repro, and no torch
#                     op library: the wheel is torch-free (pyproject.toml builds without torch;
#                     torch.ops.fp8audit is the optional fp8audit-ops package, python/ops).
#
# `fp8audit` finds the agent at ../lib/libfp8audit.so from its own directory in every layout (the
# build tree's bin/ and lib/ too). Libraries are found at run time by their RUNPATH ($ORIGIN: the
# agent's two halves, a bundled library) or are loaded into a process that has them already
# (libfp8audit_ops.so: libtorch, loaded after `import torch`). CMAKE_INSTALL_RPATH adds a
# directory of libraries the machine lacks elsewhere (e.g. a shared Protobuf of one's own).
set(_fp8audit_wheel OFF)
if(SKBUILD)
  set(_fp8audit_wheel ON)
endif()

# ---- What both layouts ship ---------------------------------------------------------------------
install(TARGETS fp8audit RUNTIME DESTINATION bin)
foreach(t fp8audit_agent fp8audit_agent_impl fp8audit_markers)
  if(TARGET ${t})
    install(TARGETS ${t} LIBRARY DESTINATION lib)
    set_property(TARGET ${t} APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
  endif()
endforeach()
if(TARGET fp8audit_ops AND NOT _fp8audit_wheel)
  install(TARGETS fp8audit_ops LIBRARY DESTINATION lib)
  # torch/lib of the same site-packages, for a wheel; elsewhere libtorch is in the process already.
  set_property(TARGET fp8audit_ops APPEND PROPERTY INSTALL_RPATH "$ORIGIN" "$ORIGIN/../../torch/lib")
endif()
# libfp8audit_model.so: state/CMakeLists.txt installs it into lib/.

# Build facts the Python package reads at run time (fp8audit/_build.py; a wheel only: in a source
# tree or a prefix install the version is the package's own).
if(_fp8audit_wheel)
  set(_build_py ${PROJECT_BINARY_DIR}/python/_build.py)
  file(WRITE ${_build_py}
       "\"\"\"Written by the build (cmake/Fp8auditInstall.cmake): what this wheel was built with.\"\"\"\n"
       "VERSION = \"${PROJECT_VERSION}\"\n")
  install(FILES ${_build_py} DESTINATION .)
  return()
endif()

# ---- The prefix layout: the command's companions, headers and the CMake package -----------------
if(TARGET fp8-repro)
  install(TARGETS fp8-repro RUNTIME DESTINATION bin)
endif()
if(NOT TARGET fp8audit_runtime)
  return()  # no libtorch (or FP8AUDIT_BUILD_RUNTIME=OFF): nothing for find_package(fp8audit)
endif()

include(CMakePackageConfigHelpers)
set(_inc include/fp8audit)  # one include root: #include "runtime/modules.h", "fp8audit/trace.pb.h"
set(_cmake_dir lib/cmake/fp8audit)

# The static libraries the runtime is made of, exported as fp8audit::<name>.
set(_exported fp8audit_runtime fp8audit_state fp8audit_proto fp8audit_vocabulary fp8audit_kernels_ref)
foreach(t fp8audit_kernels_cuda fp8audit_nvtx_events)
  get_target_property(_links fp8audit_runtime LINK_LIBRARIES)
  if(TARGET ${t} AND "${t}" IN_LIST _links)
    list(APPEND _exported ${t})
  endif()
endforeach()
# A pip libtorch carries google/protobuf headers of its own: the runtime's headers need those of
# the libprotobuf they link first (runtime/CMakeLists.txt), installed as a link to them.
get_target_property(_rt_includes fp8audit_runtime INTERFACE_INCLUDE_DIRECTORIES)
set(_protobuf_first OFF)
if("${_rt_includes}" MATCHES "protobuf_first")
  set(_protobuf_first ON)
endif()

# Include directories: the build tree's for the build, the install root for consumers; other
# absolute directories (torch, CUDA, NVTX) come to consumers with the packages they belong to.
foreach(t IN LISTS _exported)
  string(REGEX REPLACE "^fp8audit_" "" _name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${_name})
  foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
    get_target_property(_dirs ${t} ${prop})
    if(NOT _dirs)
      continue()
    endif()
    set(_out "")
    if(t STREQUAL "fp8audit_runtime" AND _protobuf_first)
      list(APPEND _out "$<INSTALL_INTERFACE:${_inc}/protobuf_first>")
    endif()
    foreach(d IN LISTS _dirs)
      if(d MATCHES "^\\$<")
        list(APPEND _out "${d}")
      else()
        list(APPEND _out "$<BUILD_INTERFACE:${d}>")
      endif()
    endforeach()
    if(prop STREQUAL "INTERFACE_INCLUDE_DIRECTORIES")
      list(APPEND _out "$<INSTALL_INTERFACE:${_inc}>")
    endif()
    set_target_properties(${t} PROPERTIES ${prop} "${_out}")
  endforeach()
endforeach()

install(TARGETS ${_exported} EXPORT fp8auditTargets ARCHIVE DESTINATION lib)
install(EXPORT fp8auditTargets NAMESPACE fp8audit:: DESTINATION ${_cmake_dir})

# Headers, in the layout the sources include them with.
install(DIRECTORY runtime/ DESTINATION ${_inc}/runtime FILES_MATCHING PATTERN "*.h"
        PATTERN demo EXCLUDE PATTERN repro EXCLUDE PATTERN tools EXCLUDE)
install(DIRECTORY state/ DESTINATION ${_inc}/state FILES_MATCHING PATTERN "*.h"
        PATTERN scenarios EXCLUDE)
install(DIRECTORY kernels/ DESTINATION ${_inc}/kernels FILES_MATCHING PATTERN "*.h")
install(DIRECTORY proto/ DESTINATION ${_inc}/proto FILES_MATCHING PATTERN "*.h"
        PATTERN fp8audit EXCLUDE)
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/fp8audit/ DESTINATION ${_inc}/fp8audit
        FILES_MATCHING PATTERN "*.pb.h")
# The schemas and the NVTX event grammar (fp8audit/nvtx_events.h).
install(DIRECTORY proto/fp8audit/ DESTINATION ${_inc}/fp8audit FILES_MATCHING PATTERN "*.proto"
        PATTERN "*.h")
if(_protobuf_first)
  install(CODE "
    set(_dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_inc}/protobuf_first\")
    file(MAKE_DIRECTORY \"\${_dir}\")
    file(REMOVE \"\${_dir}/google\")
    file(CREATE_LINK \"${Protobuf_INCLUDE_DIR}/google\" \"\${_dir}/google\" SYMBOLIC)")
endif()

# What the package's config needs to find again: the same Torch (through the interpreter the
# build used), the same Protobuf, and the CUDA toolkit when the runtime has its CUDA backend.
get_filename_component(_torch_cmake_prefix "${Torch_DIR}/.." ABSOLUTE)
set(FP8AUDIT_CONFIG_TORCH_PREFIX "${_torch_cmake_prefix}")
set(FP8AUDIT_CONFIG_TORCH_VERSION "${FP8AUDIT_TORCH_VERSION}")
set(FP8AUDIT_CONFIG_PROTOBUF_INCLUDE_DIR "${Protobuf_INCLUDE_DIR}")
get_target_property(FP8AUDIT_CONFIG_PROTOBUF_LIBRARY protobuf::libprotobuf IMPORTED_LOCATION_RELEASE)
if(NOT FP8AUDIT_CONFIG_PROTOBUF_LIBRARY)
  get_target_property(FP8AUDIT_CONFIG_PROTOBUF_LIBRARY protobuf::libprotobuf IMPORTED_LOCATION)
endif()
set(FP8AUDIT_CONFIG_CUDA OFF)
if("fp8audit_kernels_cuda" IN_LIST _exported)
  set(FP8AUDIT_CONFIG_CUDA ON)
endif()
configure_package_config_file(cmake/fp8auditConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/fp8auditConfig.cmake
                              INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fp8auditConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fp8auditConfig.cmake
              ${PROJECT_BINARY_DIR}/fp8auditConfigVersion.cmake
        DESTINATION ${_cmake_dir})
