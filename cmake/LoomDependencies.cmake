# Third-party libraries: C++ ones from Debian's packages, LibTorch from the PyPI torch wheel that
# scripts/setup.sh installs into .venv (pass -DCMAKE_PREFIX_PATH=<torch>/share/cmake, or let the
# default below find the project's own virtual environment).

find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(cxxopts REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(SQLiteCpp REQUIRED)

if(NOT Torch_DIR)
  file(GLOB _loom_venv_torch "${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake/Torch")
  if(_loom_venv_torch)
    list(GET _loom_venv_torch 0 _loom_first)
    set(Torch_DIR "${_loom_first}" CACHE PATH "TorchConfig.cmake folder")
  endif()
endif()
# The wheel's CMake files warn about CMAKE_CUDA_ARCHITECTURES; loom compiles no .cu files of its
# own, so the list only matters for what torch's config prints.
set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA archs for torch's CMake config")
find_package(Torch REQUIRED)

# The wheel links its CUDA libraries (cuBLAS, cuDNN, NCCL, ...) from sibling nvidia/*/lib folders
# through its own RPATH. The system CUDA toolkit has older copies of some of them (NCCL), so the
# linker must resolve libtorch_cuda's dependencies from the wheel's folders, and loom's binaries
# must load those same copies at run time.
get_filename_component(LOOM_TORCH_LIB_DIR "${TORCH_LIBRARY}" DIRECTORY)
file(GLOB _loom_nv_dirs LIST_DIRECTORIES true "${LOOM_TORCH_LIB_DIR}/../../nvidia/*/lib")
set(LOOM_TORCH_RUNTIME_DIRS "${LOOM_TORCH_LIB_DIR}")
foreach(_d ${_loom_nv_dirs})
  get_filename_component(_d "${_d}" REALPATH)
  list(APPEND LOOM_TORCH_RUNTIME_DIRS "${_d}")
endforeach()
list(JOIN LOOM_TORCH_RUNTIME_DIRS ":" _loom_rpath_link)
set(CMAKE_BUILD_RPATH "${LOOM_TORCH_RUNTIME_DIRS}")
set(CMAKE_INSTALL_RPATH "${LOOM_TORCH_RUNTIME_DIRS}")

add_library(loom_torch INTERFACE)
target_link_libraries(loom_torch INTERFACE ${TORCH_LIBRARIES})
target_link_options(loom_torch INTERFACE "LINKER:-rpath-link,${_loom_rpath_link}")
# torch's flags carry -D_GLIBCXX_USE_CXX11_ABI; setup.sh checks it matches Debian's libraries.
separate_arguments(_loom_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(loom_torch INTERFACE ${_loom_torch_flags})

# One precompiled <torch/torch.h> shared by every target that includes torch in its sources.
add_library(loom_torch_pch STATIC "${CMAKE_SOURCE_DIR}/cmake/torch_pch.cpp")
target_link_libraries(loom_torch_pch PUBLIC loom_torch)
target_precompile_headers(loom_torch_pch PRIVATE <torch/torch.h>)
target_compile_options(loom_torch_pch PRIVATE ${LOOM_WARNING_FLAGS})

# Targets whose sources include torch call this to reuse the precompiled header.
function(loom_use_torch_pch target)
  target_link_libraries(${target} PRIVATE loom_torch)
  target_precompile_headers(${target} REUSE_FROM loom_torch_pch)
endfunction()

if(LOOM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
