# ccache as the compiler launcher when present.
#  - Precompiled headers (LoomDependencies.cmake) only hit the cache with the sloppiness below,
#    which is safe here because the PCH is rebuilt whenever a header it includes changes.
#  - CCACHE_BASEDIR is the source tree, and the working directory is not hashed: every path
#    under the tree (sources, include folders, .venv's torch, the build folder) is hashed relative
#    to it, so a second clone of the project in another folder, or another build folder, hits
#    the objects a first one compiled (issue 43; docs/TESTING.md has the measurement). loom's
#    Release flags have no -g, so no absolute path ends up in an object file either.
find_program(LOOM_CCACHE ccache)
if(LOOM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      "${CMAKE_COMMAND};-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;CCACHE_BASEDIR=${CMAKE_SOURCE_DIR};CCACHE_NOHASHDIR=true;${LOOM_CCACHE}")
endif()
