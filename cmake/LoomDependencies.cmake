# Third-party libraries: C++ ones from Debian's packages, LibTorch from the PyPI torch wheel that
# scripts/setup.sh installs into .venv (pass -DCMAKE_PREFIX_PATH=<torch>/share/cmake, or let the
# default below find the project's own virtual environment).

# A machine without loom's Debian packages (a GPU host) builds against a bundle of them instead:
# scripts/gpu_bundle.sh unpacks the .deb files into gpu_bundle/prefix, and
# scripts/gpu/relocate_prefix.sh points their CMake and pkg-config files at wherever the prefix
# now lies. -DLOOM_DEPS_PREFIX=<that prefix> searches it before the system.
set(LOOM_DEPS_PREFIX "" CACHE PATH "Unpacked Debian packages of loom's C++ deps (gpu_bundle/prefix)")
if(LOOM_DEPS_PREFIX)
  get_filename_component(LOOM_DEPS_PREFIX "${LOOM_DEPS_PREFIX}" REALPATH)
  set(_loom_deps_usr "${LOOM_DEPS_PREFIX}/usr")
  set(LOOM_DEPS_LIBDIR "${_loom_deps_usr}/lib/x86_64-linux-gnu")
  if(NOT EXISTS "${LOOM_DEPS_LIBDIR}/cmake/yaml-cpp/yaml-cpp-config.cmake")
    message(FATAL_ERROR "LOOM_DEPS_PREFIX=${LOOM_DEPS_PREFIX} is not a loom deps prefix "
                        "(run scripts/gpu_bundle.sh, then scripts/gpu/relocate_prefix.sh)")
  endif()
  # relocate_prefix.sh writes the prefix's real path into the configs; a prefix copied or moved
  # since still names the old place.
  file(READ "${LOOM_DEPS_LIBDIR}/cmake/yaml-cpp/yaml-cpp-targets.cmake" _loom_targets)
  string(FIND "${_loom_targets}" "\"${LOOM_DEPS_LIBDIR}/cmake/yaml-cpp\"" _loom_at)
  if(_loom_at EQUAL -1)
    message(FATAL_ERROR "${LOOM_DEPS_PREFIX} is not relocated to where it lies now: run "
                        "scripts/gpu/relocate_prefix.sh ${LOOM_DEPS_PREFIX}")
  endif()
  # usr finds the configs under lib/<multiarch>/cmake, lib/cmake and share/cmake where CMake knows
  # the Debian multiarch name; the explicit lib/x86_64-linux-gnu entries cover hosts where it does
  # not (CMAKE_LIBRARY_ARCHITECTURE empty on non-Debian distributions).
  list(PREPEND CMAKE_PREFIX_PATH "${_loom_deps_usr}" "${LOOM_DEPS_LIBDIR}/cmake")
  list(PREPEND CMAKE_LIBRARY_PATH "${LOOM_DEPS_LIBDIR}")
  # Header-only packages without a CMake target (stb) and sqlite3.h: -isystem is searched before
  # the compiler's default /usr/include.
  include_directories(SYSTEM "${_loom_deps_usr}/include")
endif()

find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(cxxopts REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(SQLiteCpp REQUIRED)

# The project's .venv torch is only a hint: a torch named by Torch_DIR or CMAKE_PREFIX_PATH (a
# second LibTorch version, a GPU host's own wheel) is searched first and wins.
file(GLOB _loom_venv_torch "${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/torch/share/cmake")
# The wheel's CMake files warn about CMAKE_CUDA_ARCHITECTURES; loom compiles no .cu files of its
# own, so the list only matters for what torch's config prints.
set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA archs for torch's CMake config")
find_package(Torch REQUIRED HINTS ${_loom_venv_torch})
message(STATUS "LibTorch ${Torch_VERSION}: ${Torch_DIR}")

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
# The deps prefix's libraries load from the prefix without LD_LIBRARY_PATH.
if(LOOM_DEPS_PREFIX)
  list(APPEND LOOM_TORCH_RUNTIME_DIRS "${LOOM_DEPS_LIBDIR}")
endif()
set(CMAKE_BUILD_RPATH "${LOOM_TORCH_RUNTIME_DIRS}")
set(CMAKE_INSTALL_RPATH "${LOOM_TORCH_RUNTIME_DIRS}")

add_library(loom_torch INTERFACE)
target_link_libraries(loom_torch INTERFACE ${TORCH_LIBRARIES})
target_link_options(loom_torch INTERFACE "LINKER:-rpath-link,${_loom_rpath_link}")
# Some torch wheels (2.11 among them; pytorch/pytorch#133437) export copies of libstdc++'s
# std::filesystem functions from libtorch.so, unversioned. Linked after libtorch, libstdc++ loses:
# loom's std::filesystem::remove_all calls torch's copy, which jumps to address 0. libstdc++ named
# before the objects becomes the first library loaded, so its definitions win at link and at run
# time, whatever a torch exports (--no-as-needed: Ubuntu's linker would drop it from there).
target_link_options(loom_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
# torch's flags carry -D_GLIBCXX_USE_CXX11_ABI; setup.sh checks it matches Debian's libraries.
separate_arguments(_loom_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(loom_torch INTERFACE ${_loom_torch_flags})

# One precompiled <torch/torch.h> shared by every target that includes torch in its sources.
add_library(loom_torch_pch STATIC "${CMAKE_SOURCE_DIR}/cmake/torch_pch.cpp")
target_link_libraries(loom_torch_pch PUBLIC loom_torch)
target_precompile_headers(loom_torch_pch PRIVATE <torch/torch.h>)
target_compile_options(loom_torch_pch PRIVATE ${LOOM_WARNING_FLAGS})

# Targets whose sources include torch call this to reuse the precompiled header. Their sources
# that include no torch header, directly or through loom's headers, compile without it: loading
# the 700 MB header costs such a unit more than the whole unit (cmake/torch_free_sources.py).
# The scan runs at configure time; a unit that starts to use torch later still compiles (its own
# includes bring torch), only slower until the next configure.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
function(loom_use_torch_pch target)
  target_link_libraries(${target} PRIVATE loom_torch)
  target_precompile_headers(${target} REUSE_FROM loom_torch_pch)
  get_target_property(sources ${target} SOURCES)
  set(absolute "")
  foreach(s IN LISTS sources)
    get_filename_component(s "${s}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND absolute "${s}")
  endforeach()
  set(dirs "${PROJECT_SOURCE_DIR}/include" "${PROJECT_BINARY_DIR}/generated"
           "${CMAKE_CURRENT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/tests/common"
           "${PROJECT_SOURCE_DIR}/tests/model" "${PROJECT_SOURCE_DIR}/tests/train")
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/cmake/torch_free_sources.py"
            "${dirs}" "${absolute}"
    OUTPUT_VARIABLE free OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  if(free)
    string(REPLACE "\n" ";" free "${free}")
    set_source_files_properties(${free} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
  loom_unity_build_later(${target})
endfunction()

if(LOOM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
