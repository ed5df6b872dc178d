# ccache as the compiler launcher when present. Precompiled headers (see LoomTorch.cmake) only hit
# the cache with the sloppiness below, which is safe here because the PCH is rebuilt whenever a
# header it includes changes.
find_program(LOOM_CCACHE ccache)
if(LOOM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      "${CMAKE_COMMAND};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;${LOOM_CCACHE}")
endif()
