# The one place that decides which PyTorch fp8audit builds against: the torch of one Python
# interpreter, FP8AUDIT_PYTHON. Everything that needs Python with torch (this find, the tests that
# load the op library into Python, Python packages and their tests) uses that interpreter.
#
#   FP8AUDIT_PYTHON  -D on the command line > a wheel build (scikit-build-core, SKBUILD): the
#                    interpreter that builds it (Python_EXECUTABLE; with pip's build isolation its
#                    build environment, whose torch pyproject.toml pins) > $FP8AUDIT_PYTHON >
#                    <source>/.venv/bin/python (made by scripts/setup.sh where python3 has no torch
#                    2.x) > python3 on PATH (e.g. a GPU machine's job environment with its own
#                    PyTorch).
#
# Torch's CMake package is taken from that interpreter's torch.utils.cmake_prefix_path and from
# nowhere else (never a system libtorch such as Debian's), unless Torch_DIR is given explicitly (a
# libtorch C++ distribution). Sets FP8AUDIT_HAVE_TORCH, FP8AUDIT_TORCH_VERSION, Torch_VERSION,
# TORCH_LIBRARIES and TORCH_INCLUDE_DIRS; Torch's imported targets (torch, c10, c10_cuda, ...).

if(SKBUILD AND Python_EXECUTABLE AND NOT FP8AUDIT_PYTHON)
  set(FP8AUDIT_PYTHON "${Python_EXECUTABLE}" CACHE FILEPATH
      "Python interpreter whose torch fp8audit builds against and tests with" FORCE)
  # pip's isolated build environment is new at each build, behind the same interpreter: asked anew.
  unset(FP8AUDIT_TORCH_QUERIED_FOR CACHE)
elseif(NOT FP8AUDIT_PYTHON)
  if(DEFINED ENV{FP8AUDIT_PYTHON} AND NOT "$ENV{FP8AUDIT_PYTHON}" STREQUAL "")
    set(_fp8audit_python "$ENV{FP8AUDIT_PYTHON}")
  elseif(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(_fp8audit_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  else()
    find_program(_fp8audit_python NAMES python3 NO_CACHE)
  endif()
  set(FP8AUDIT_PYTHON "${_fp8audit_python}" CACHE FILEPATH
      "Python interpreter whose torch fp8audit builds against and tests with" FORCE)
endif()

# Torch's config changes global CUDA settings (it appends -gencode flags for eleven architectures to
# CMAKE_CUDA_FLAGS and turns CMAKE_CUDA_ARCHITECTURES off): it runs in a function so that none of
# that reaches fp8audit's own CUDA targets; only what is listed at the end is passed out.
function(_fp8audit_find_torch)
  if(Torch_DIR AND NOT Torch_DIR STREQUAL FP8AUDIT_TORCH_DIR_FROM_PYTHON)
    find_package(Torch CONFIG QUIET)  # given explicitly (e.g. a libtorch C++ distribution)
  elseif(FP8AUDIT_PYTHON)
    # Asked once per interpreter (importing torch takes seconds); kept in the cache.
    if(NOT FP8AUDIT_TORCH_QUERIED_FOR STREQUAL FP8AUDIT_PYTHON)
      execute_process(
        COMMAND ${FP8AUDIT_PYTHON} -c
                "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
        OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
      set(prefix "")
      set(abi "")
      if(rc EQUAL 0)
        string(REPLACE "\n" ";" out "${out}")
        list(GET out 0 prefix)
        list(GET out 1 version)
        list(GET out 2 abi)
        message(STATUS "fp8audit: ${FP8AUDIT_PYTHON} has torch ${version} (${prefix})")
      else()
        message(STATUS "fp8audit: ${FP8AUDIT_PYTHON} cannot import torch; run scripts/setup.sh "
                       "or set FP8AUDIT_PYTHON (or Torch_DIR)")
      endif()
      # What an earlier interpreter's torch left in the cache must not be reused.
      foreach(v Torch_DIR Caffe2_DIR TORCH_LIBRARY c10_LIBRARY kineto_LIBRARY C10_CUDA_LIBRARY)
        unset(${v} CACHE)
      endforeach()
      set(FP8AUDIT_TORCH_PREFIX "${prefix}" CACHE INTERNAL "torch.utils.cmake_prefix_path")
      set(FP8AUDIT_TORCH_CXX11_ABI "${abi}" CACHE INTERNAL "torch._C._GLIBCXX_USE_CXX11_ABI")
      set(FP8AUDIT_TORCH_QUERIED_FOR "${FP8AUDIT_PYTHON}" CACHE INTERNAL "")
    endif()
    if(FP8AUDIT_TORCH_CXX11_ABI STREQUAL "0")
      message(FATAL_ERROR "fp8audit: the torch of ${FP8AUDIT_PYTHON} was built with the pre-C++11 "
                          "libstdc++ ABI (torch._C._GLIBCXX_USE_CXX11_ABI is 0); fp8audit needs 1")
    endif()
    if(FP8AUDIT_TORCH_PREFIX)
      # TorchConfig finds Caffe2's config and its libraries through the usual search paths, where a
      # system libtorch would come first: the interpreter's torch goes first.
      get_filename_component(root "${FP8AUDIT_TORCH_PREFIX}/../.." ABSOLUTE)
      list(PREPEND CMAKE_PREFIX_PATH ${FP8AUDIT_TORCH_PREFIX} ${root})
      # Only for Torch's own (discarded) nvcc flags: no GPU probing, no warning about ours.
      set(TORCH_CUDA_ARCH_LIST "9.0;12.0")
      set(Python_EXECUTABLE ${FP8AUDIT_PYTHON})  # Caffe2's config looks for Python too
      unset(CMAKE_CUDA_ARCHITECTURES)
      find_package(Torch CONFIG QUIET PATHS ${FP8AUDIT_TORCH_PREFIX}/Torch NO_DEFAULT_PATH)
      set(FP8AUDIT_TORCH_DIR_FROM_PYTHON "${Torch_DIR}" CACHE INTERNAL "")
    endif()
  endif()
  foreach(v Torch_FOUND Torch_VERSION TORCH_LIBRARIES TORCH_INCLUDE_DIRS)
    set(${v} "${${v}}" PARENT_SCOPE)
  endforeach()
endfunction()

set(FP8AUDIT_HAVE_TORCH OFF)
set(FP8AUDIT_TORCH_VERSION "")
if(NOT FP8AUDIT_TORCH STREQUAL "OFF")
  _fp8audit_find_torch()
  if(Torch_FOUND)
    if(Torch_VERSION VERSION_LESS 2.0)
      message(FATAL_ERROR "fp8audit: Torch ${Torch_VERSION} at ${Torch_DIR}; fp8audit needs 2.x")
    endif()
    # Torch's headers reach our targets as SYSTEM includes (those of imported targets are, and
    # TORCH_INCLUDE_DIRS is added with SYSTEM): -Werror applies to our own code only.
    set(FP8AUDIT_HAVE_TORCH ON)
    set(FP8AUDIT_TORCH_VERSION ${Torch_VERSION})
  elseif(FP8AUDIT_TORCH STREQUAL "ON")
    message(FATAL_ERROR "FP8AUDIT_TORCH=ON but Torch was not found through FP8AUDIT_PYTHON="
                        "${FP8AUDIT_PYTHON} (run scripts/setup.sh, or set FP8AUDIT_PYTHON or "
                        "Torch_DIR)")
  endif()
endif()
