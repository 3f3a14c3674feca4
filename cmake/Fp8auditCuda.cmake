# CUDA for fp8audit and for the optional torch ops package (python/ops): the toolkit (headers and
# libraries: CUPTI, NVTX3) is used when present, GPU or not; the CUDA language is enabled where
# FP8AUDIT_CUDA (AUTO, ON, OFF) allows and nvcc is found. Sets FP8AUDIT_HAVE_CUDA_LANG.
find_package(CUDAToolkit QUIET)
set(FP8AUDIT_HAVE_CUDA_LANG OFF)
if(NOT FP8AUDIT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90 and sm_120 machine code, plus PTX for newer parts.
      set(CMAKE_CUDA_ARCHITECTURES 90-real 120-real 120-virtual)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 dialect for nvcc; device code is C++17. One shared CUDA runtime
    # per process, as libtorch uses.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(FP8AUDIT_HAVE_CUDA_LANG ON)
  elseif(FP8AUDIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FP8AUDIT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
