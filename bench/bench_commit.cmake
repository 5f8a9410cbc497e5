# Writes OUT: `#define HEXISEQ_COMMIT "<short HEAD>[+dirty]"` for the benches' headers, at build
# time (a commit captured when CMake configured would go stale with every later commit). The
# file is only rewritten when the commit changes, so an unchanged tree rebuilds nothing.
#   cmake -DSOURCE=<source dir> -DOUT=<header> -P bench_commit.cmake
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${SOURCE}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- src bench tests WORKING_DIRECTORY ${SOURCE}
                  RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    set(commit "${commit}+dirty")
  endif()
endif()
file(WRITE ${OUT}.new "#define HEXISEQ_COMMIT \"${commit}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.new ${OUT})
file(REMOVE ${OUT}.new)
